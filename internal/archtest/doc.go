// Package archtest holds the project's checks of its own shape, as tests:
// the import rules of the layout (docs/design.md, "Dependencies point one
// way"), the spelling of MQTT spec tags in comments, and that the docs
// cite tests that exist. It has no code of its own; run it with
// `go test ./internal/archtest/`.
package archtest
