// talos-checker reads a Talos machine config (one or more YAML documents) on stdin and judges it
// the way a booting Talos machine does: configloader.NewFromBytes (the strict decoder: unknown
// keys are errors) and then Validate in cloud mode with strict validation (warnings are errors),
// as `talosctl validate --mode cloud --strict` does. Test tooling only: the operator itself is C++
// (src/gpu/talos.h has its own checker) and never runs this.
//
// Output: "ok", or Talos's own error text as it gives it (multi-line: the unknown keys it found
// are printed as YAML). Exit status: 0 accepted, 1 refused, 2 usage/IO error.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
)

// cloudMode is Talos's "cloud" runtime mode (machined's runtime.ModeCloud, which lives in an
// internal package of the talos module): no install section required, not in a container.
type cloudMode struct{}

func (cloudMode) String() string        { return "cloud" }
func (cloudMode) RequiresInstall() bool { return false }
func (cloudMode) InContainer() bool     { return false }

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "talos-checker: reading stdin:", err)
		os.Exit(2)
	}

	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		fmt.Println("load:", err)
		os.Exit(1)
	}

	warnings, err := cfg.Validate(cloudMode{}, validation.WithLocal(), validation.WithStrict())
	for _, w := range warnings {
		fmt.Println("warning:", w)
	}

	if err != nil {
		fmt.Println("validate:", err)
		os.Exit(1)
	}

	fmt.Println("ok")
}
