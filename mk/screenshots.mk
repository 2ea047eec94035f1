# Status page screenshots; included from the Makefile. Not part of `make test`.
#
#   make screenshots   headless Debian chromium (installed by
#                      scripts/install-screenshot-deps.sh) opens the status
#                      page of the real binary while the uplink is up, down
#                      and back; writes docs/status-page-{up,outage,recovered}.png
#                      (docs/status-page.md). About 3 minutes.

.PHONY: screenshots

screenshots:
	./scripts/install-screenshot-deps.sh
	GO=$(GO) ./scripts/screenshots.sh
