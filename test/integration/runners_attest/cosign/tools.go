//go:build tools

// Package tools pins the cosign CLI in go.mod/go.sum; build-cosign.sh builds it by import path.
package tools

import (
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
