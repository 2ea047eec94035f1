// Package auth implements the gateway's Authenticator and Authorizer over two
// plain files an operator edits: a password file of "user:bcrypt-hash" lines
// (managed with `edgegw passwd`) and an ACL file of topic rules. Both are
// re-read by Reload (SIGHUP) without dropping clients; a file that fails to
// parse keeps the previous rules in force and the error names the file and
// line.
package auth

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"golang.org/x/crypto/bcrypt"
)

// ErrBadCredentials is returned for an unknown user or a wrong password;
// the two are not distinguished to the client.
var ErrBadCredentials = errors.New("bad user name or password")

// Files holds the current password and ACL rules.
type Files struct {
	PasswordFile string // "" = no password check (any user name is accepted)
	ACLFile      string // "" = every client may publish and subscribe everywhere

	cur atomic.Pointer[rules]
	ver verifier      // bounds the CPU password checks may take (verify.go)
	gen atomic.Uint64 // counts successful loads (Generation)
}

type rules struct {
	users map[string][]byte // user -> bcrypt hash
	acl   *acl              // nil = allow all
	dummy func() []byte     // a hash at the stored hashes' cost, for unknown users
}

// Load reads the files named in f. It is also the reload: on error the
// previous rules stay in force.
func (f *Files) Load() error {
	r := &rules{}
	var errs []error
	if f.PasswordFile != "" {
		users, err := ReadPasswordFile(f.PasswordFile)
		if err != nil {
			errs = append(errs, err)
		}
		r.users = users
		r.dummy = dummyHashLike(users)
	}
	if f.ACLFile != "" {
		a, err := readACL(f.ACLFile)
		if err != nil {
			errs = append(errs, err)
		}
		r.acl = a
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	f.cur.Store(r)
	f.ver.forget()
	f.gen.Add(1)
	return nil
}

// Generation changes whenever Load puts new rules in force. A verdict
// cached under one generation must not be used under another.
func (f *Files) Generation() uint64 { return f.gen.Load() }

// ChecksPasswords reports whether there is a password file to check
// credentials against (gateway.Authenticator).
func (f *Files) ChecksPasswords() bool { return f.PasswordFile != "" }

// Authenticate checks a CONNECT's credentials. A client identified by a
// verified certificate whose CN is used as its user name needs no password.
func (f *Files) Authenticate(clientID, username string, password []byte, hasPassword bool, certCN string) error {
	r := f.cur.Load()
	if r == nil || f.PasswordFile == "" {
		return nil
	}
	if certCN != "" && username == certCN && !hasPassword {
		return nil // mTLS: the certificate is the credential
	}
	hash, ok := r.users[username]
	if !ok || !hasPassword {
		// Compare against a real hash anyway so unknown users take as long.
		f.ver.compare(r.dummy(), password)
		return ErrBadCredentials
	}
	if !f.ver.check(username, hash, password) {
		return ErrBadCredentials
	}
	return nil
}

// Recent reports whether username logged in with password lately (the
// verifier's cache of successful checks, keyed by an HMAC: no password is
// kept): the gateway lets such a login skip the password-guessing tarpit.
func (f *Files) Recent(username string, password []byte) bool {
	r := f.cur.Load()
	if r == nil || f.PasswordFile == "" {
		return false
	}
	hash, ok := r.users[username]
	return ok && f.ver.recent(username, hash, password)
}

// dummyHashLike returns, made on first use, a bcrypt hash at the cost of
// the stored hashes, so a check for an unknown user costs what a known
// user's does.
func dummyHashLike(users map[string][]byte) func() []byte {
	cost := bcrypt.DefaultCost
	for _, h := range users {
		if c, err := bcrypt.Cost(h); err == nil {
			cost = c
		}
		break
	}
	return sync.OnceValue(func() []byte {
		h, _ := bcrypt.GenerateFromPassword([]byte("edgegw-timing"), cost)
		return h
	})
}

// CanPublish reports whether the client may publish to topic.
func (f *Files) CanPublish(username, clientID, topic string) bool {
	r := f.cur.Load()
	if r == nil || r.acl == nil {
		return true
	}
	return r.acl.allowed(username, clientID, topic, accessWrite)
}

// CanRead reports whether a message on topic may be delivered to the
// client. It is asked for every message a subscription matches (the
// gateway caches the verdicts per session and generation): a subscription
// allowed as a whole, such as shared/+/x, still must not carry the messages
// of a denied subtree such as shared/secret/#.
func (f *Files) CanRead(username, clientID, topic string) bool {
	r := f.cur.Load()
	if r == nil || r.acl == nil {
		return true
	}
	return r.acl.allowed(username, clientID, topic, accessRead)
}

// CanSubscribe reports whether the client may subscribe to filter: a read
// rule must cover every topic the filter can match, and no deny rule may
// cover the filter. Denied topics a wider filter also reaches are
// withheld from it per delivered message (CanRead).
func (f *Files) CanSubscribe(username, clientID, filter string) bool {
	r := f.cur.Load()
	if r == nil || r.acl == nil {
		return true
	}
	return r.acl.allowed(username, clientID, filter, accessRead)
}

// ReadPasswordFile parses "user:hash" lines; blank lines and # comments are
// ignored.
func ReadPasswordFile(path string) (map[string][]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("password file: %w", err)
	}
	defer fh.Close()
	users := make(map[string][]byte)
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("%s:%d: want user:bcrypt-hash", path, n)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("%s:%d: user %q: not a bcrypt hash: %v", path, n, user, err)
		}
		users[user] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("password file %s: %w", path, err)
	}
	return users, nil
}

// SetPassword adds or replaces user's entry in the password file at path,
// creating it (mode 0640) if missing, and writes it atomically.
func SetPassword(path, user string, password []byte) error {
	if user == "" || strings.ContainsAny(user, ":\n\r") {
		return fmt.Errorf("user name %q: must be non-empty without ':' or newlines", user)
	}
	// The file's reader takes a line starting with '#' for a comment and
	// trims a line's spaces: such a name could never log in.
	if strings.HasPrefix(user, "#") || strings.TrimLeftFunc(user, unicode.IsSpace) != user {
		return fmt.Errorf("user name %q: must not start with '#' or a space (the password file would read it as a comment or another name)", user)
	}
	if len(password) == 0 {
		return errors.New("empty password")
	}
	hash, err := bcrypt.GenerateFromPassword(password, bcrypt.DefaultCost)
	if err != nil {
		return fmt.Errorf("hash password: %w", err)
	}
	var lines []string
	if b, err := os.ReadFile(path); err == nil {
		lines = strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	entry := user + ":" + string(hash)
	replaced := false
	for i, l := range lines {
		if u, _, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && u == user && !strings.HasPrefix(l, "#") {
			lines[i] = entry
			replaced = true
		}
	}
	if !replaced {
		lines = append(lines, entry)
	}
	if len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o640); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}
