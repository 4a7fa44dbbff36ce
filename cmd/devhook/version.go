package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is stamped by scripts/release (-ldflags "-X main.version=v1.2.0").
// Empty in a build that was not stamped: go install …@v1.2.0 and go build
// then say the module version the build info records.
var version string

func newVersionCmd(info *debug.BuildInfo) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print devhook's version: the module version and the commit it was built from",
		Example: `  devhook version`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "devhook %s\n", versionString(version, info))
			return nil
		},
	}
}

// versionString is the version, stamped or else the module version from
// the build info, and, when the build recorded it, the commit, its time
// and whether the tree had changes: "v1.2.0 (commit 0123abcd4567,
// 2026-11-23T10:00:00Z)" or "(devel) (commit 0123abcd4567, modified)". A
// module built by go install …@version records no commit of its own; its
// pseudo-version, if it has one, names the commit.
func versionString(stamped string, info *debug.BuildInfo) string {
	if info == nil {
		if stamped != "" {
			return stamped
		}
		return "unknown (built without module information)"
	}
	v := stamped
	if v == "" {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	parts := []string{"commit " + rev}
	if at != "" {
		parts = append(parts, at)
	}
	if modified {
		parts = append(parts, "modified")
	}
	return v + " (" + strings.Join(parts, ", ") + ")"
}
