//go:build tools

// Package tools pins tailscaled and the tailscale CLI in go.mod/go.sum; build-mesh.sh builds them by
// import path.
package tools

import (
	_ "tailscale.com/cmd/tailscale"
	_ "tailscale.com/cmd/tailscaled"
)
