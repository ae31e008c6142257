// Wrapper module for the Tailscale API v2 client check used by tests
// (scripts/build-tailscale-client-check.sh). The client is pinned exactly: the module proxy does not
// list versions for every module, so nothing here may rely on "@latest".
module hyperslice.dev/tailscale-client-check

go 1.26.5

require tailscale.com/client/tailscale/v2 v2.12.0

require (
	github.com/tailscale/hujson v0.0.0-20220506213045-af5ed07155e5 // indirect
	golang.org/x/oauth2 v0.34.0 // indirect
)
