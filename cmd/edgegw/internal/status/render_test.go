package status

import (
	"strings"
	"testing"
	"time"
)

// TestRenderEscapes: client ids, user names, topics in errors and bridge
// names come from the network or the config; none can inject markup.
func TestRenderEscapes(t *testing.T) {
	evil := `<img src=x onerror=alert(1)>"'&`
	now := time.Now()
	d := pageData{Now: now, Span: "1h00m", Snapshot: Snapshot{Version: evil,
		Bridges: []Bridge{{Name: evil, State: "disconnected", Since: now, LastError: evil, LastErrorText: evil,
			Address: evil, Addresses: []string{evil}}},
		Listeners: []Listener{{Name: evil, Type: "tcp", Address: evil, Clients: []Client{{ClientID: evil,
			Username: evil, Remote: evil, Protocol: "5.0", Since: now, Slow: true}}}},
		SerialLinks: []SerialLink{{Listener: evil, Device: evil, Framing: evil, State: evil,
			FramesBad: map[string]int64{evil: 1}}},
		Drops: []Drop{{Reason: evil, Count: 1}}}}
	html := string(renderPage(d, nil, nil))
	if strings.Contains(html, "<img src=x") || strings.Contains(html, `"'&`) {
		t.Fatalf("unescaped markup in the page:\n%s", html)
	}
	if n := strings.Count(html, "&lt;img src=x onerror=alert(1)&gt;"); n < 15 {
		t.Fatalf("the value appears escaped %d times, want every place (15 or more):\n%s", n, html)
	}
	for _, fact := range []string{`<p class="banner disconnected"`, `<tr class="slow">`, `<tr class="warn">`,
		`chart.svg?bridge=%3Cimg+src%3Dx+onerror%3Dalert%281%29%3E%22%27%26&amp;kind=rate`} {
		if !strings.Contains(html, fact) {
			t.Errorf("page lacks %q", fact)
		}
	}
}
