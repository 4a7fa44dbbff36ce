// Command pack writes the release files that describe or wrap devhook's
// binaries, for scripts/release:
//
//	pack image -arch amd64 -binary BIN -version V -created T -o F   the relay's container image (image.go)
//	pack brew -version V -url BASE -o devhook.rb ARCHIVE...          a Homebrew formula (packagers.go)
//	pack scoop -version V -url BASE -o devhook.json ZIP...           a Scoop manifest (packagers.go)
//
// Each writes the same bytes from the same inputs.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "pack: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: pack image|brew|scoop [flags]")
	}
	switch args[0] {
	case "image":
		return runImage(args[1:])
	case "brew":
		return runBrew(args[1:])
	case "scoop":
		return runScoop(args[1:])
	}
	return fmt.Errorf("unknown command %q: image, brew or scoop", args[0])
}

// writeFile writes b to path through a temporary file in its directory,
// so that a failed run leaves no half-written release file.
func writeFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pack-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
