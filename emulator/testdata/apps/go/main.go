// The go application of devhook's emulator tests: it prints its input and
// arguments as the run's output, or, when the input's mode is "fail",
// writes a line on standard error and exits 2.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

func main() {
	raw, _ := io.ReadAll(os.Stdin)
	var in map[string]any
	json.Unmarshal(raw, &in)
	if in["mode"] == "fail" {
		fmt.Fprintln(os.Stderr, "go app: bad input")
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "go app: read %d bytes\n", len(raw))
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"options":  map[string]any{},
		"solution": map[string]any{"input": json.RawMessage(raw), "args": os.Args[1:]},
		"metrics":  map[string]any{},
	})
}
