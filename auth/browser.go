package auth

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"time"
)

// OpenSystemBrowser opens url in the system's browser (open on macOS,
// rundll32 on Windows, xdg-open elsewhere). It waits at most 10 s for the
// opener, which normally returns once the browser has the URL.
func OpenSystemBrowser(ctx context.Context, url string) error {
	var name string
	var args []string
	switch runtime.GOOS {
	case "darwin":
		name, args = "open", []string{url}
	case "windows":
		name, args = "rundll32", []string{"url.dll,FileProtocolHandler", url}
	default:
		name, args = "xdg-open", []string{url}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := exec.CommandContext(ctx, name, args...).Run(); err != nil {
		return fmt.Errorf("run %s: %w", name, err)
	}
	return nil
}
