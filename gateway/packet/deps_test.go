package packet_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestStandardLibraryOnly: the codec is a leaf; its non-test files import
// only the standard library (so nothing else can leak in transitively).
func TestStandardLibraryOnly(t *testing.T) {
	for _, dir := range []string{".", "packettest"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			first, _, _ := strings.Cut(imp, "/")
			if strings.Contains(first, ".") && !strings.HasPrefix(imp, "github.com/edgegw/edgegw/gateway/packet") {
				t.Errorf("%s imports %s", dir, imp)
			}
		}
	}
}
