// talos-checker reads a Talos machine config (one or more YAML documents) on stdin and judges it
// the way a booting Talos machine does: configloader.NewFromBytes (the strict decoder: unknown
// keys are errors) and then Validate in cloud mode with strict validation (warnings are errors),
// as `talosctl validate --mode cloud --strict` does. Test tooling only: the operator itself is C++
// (src/gpu/talos.h has its own checker) and never runs this.
//
// Output: "ok", or Talos's own error text as it gives it (multi-line: the unknown keys it found
// are printed as YAML). Exit status: 0 accepted, 1 refused, 2 usage/IO error.
//
// `talos-checker --keys` prints instead the keys Talos's types know ("<section> <key>" per line),
// so a test can hold the C++ checker's allow-lists to this version's Go types.
package main

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime/extensions"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
)

// cloudMode is Talos's "cloud" runtime mode (machined's runtime.ModeCloud, which lives in an
// internal package of the talos module): no install section required, not in a container.
type cloudMode struct{}

func (cloudMode) String() string        { return "cloud" }
func (cloudMode) RequiresInstall() bool { return false }
func (cloudMode) InContainer() bool     { return false }

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--keys" {
		printKeys()

		return
	}

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

// printKeys prints the yaml keys of the config types the C++ checker knows about.
func printKeys() {
	sections := []struct {
		name string
		typ  reflect.Type
	}{
		{"config", reflect.TypeFor[v1alpha1.Config]()},
		{"machine", reflect.TypeFor[v1alpha1.MachineConfig]()},
		{"cluster", reflect.TypeFor[v1alpha1.ClusterConfig]()},
		{"ExtensionServiceConfig", reflect.TypeFor[extensions.ServiceConfigV1Alpha1]()},
		{"HostnameConfig", reflect.TypeFor[network.HostnameConfigV1Alpha1]()},
	}
	for _, s := range sections {
		keys := yamlKeys(s.typ)
		sort.Strings(keys)

		for _, k := range keys {
			fmt.Println(s.name, k)
		}
	}
}

// yamlKeys lists the keys the yaml decoder accepts for a struct type (inline fields flattened).
func yamlKeys(t reflect.Type) []string {
	var keys []string

	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("yaml")
		if !ok || tag == "-" {
			continue
		}

		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(opts, "inline") {
			keys = append(keys, yamlKeys(f.Type)...)

			continue
		}

		if name == "" {
			name = strings.ToLower(f.Name)
		}

		keys = append(keys, name)
	}

	return keys
}
