//go:build tools

// Package tools pins the headscale command in go.mod/go.sum; build-mesh.sh builds it by import path.
package tools

import _ "github.com/juanfont/headscale/cmd/headscale"
