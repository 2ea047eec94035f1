package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/internal/config"
)

// TestStatusPageAuth: with metrics.address beyond loopback and a password
// file, the page and status.json need basic auth of a user in that file;
// on loopback, or without a password file, they do not.
func TestStatusPageAuth(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "passwd")
	if err := auth.SetPassword(pw, "operator", []byte("cabinet-42")); err != nil {
		t.Fatal(err)
	}
	files := &auth.Files{PasswordFile: pw}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	gw := gateway.New(gateway.Options{}, nil)
	get := func(cfg config.Config, f *auth.Files, path, user, pass string) int {
		t.Helper()
		h := newStatusPage(cfg, gw, nil, nil, f)
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusUnauthorized && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("401 without a Basic challenge")
		}
		return rec.Code
	}
	cfg := config.Default()
	cfg.Auth.PasswordFile = pw

	cfg.Metrics.Address = "0.0.0.0:18830" // exposed
	for _, path := range []string{"/", "/status.json"} {
		if c := get(cfg, files, path, "", ""); c != http.StatusUnauthorized {
			t.Errorf("exposed %s without credentials: %d, want 401", path, c)
		}
		if c := get(cfg, files, path, "operator", "wrong"); c != http.StatusUnauthorized {
			t.Errorf("exposed %s with a wrong password: %d, want 401", path, c)
		}
		if c := get(cfg, files, path, "operator", "cabinet-42"); c != http.StatusOK {
			t.Errorf("exposed %s with the password: %d, want 200", path, c)
		}
	}
	for _, addr := range []string{"127.0.0.1:18830", "[::1]:18830", "localhost:18830"} {
		cfg.Metrics.Address = addr
		if c := get(cfg, files, "/", "", ""); c != http.StatusOK {
			t.Errorf("%s (loopback) without credentials: %d, want 200", addr, c)
		}
	}
	cfg.Metrics.Address, cfg.Auth.PasswordFile = "0.0.0.0:18830", ""
	if c := get(cfg, nil, "/", "", ""); c != http.StatusOK {
		t.Errorf("exposed without a password file: %d, want 200 (nothing to check against)", c)
	}
}
