// Package archtest holds the project's checks of its own shape, as tests:
// the import rules of the layout in DESIGN.md ("Dependencies point one
// way") and the spelling of MQTT spec tags in comments. It has no code of
// its own; run it with `go test ./internal/archtest/`.
package archtest
