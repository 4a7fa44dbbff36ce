package devhook_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The agent speaks the relay's protocol through its client and never
// depends on the relay's server or stores (docs/ARCHITECTURE.md): a
// change that makes it import one fails here.
func TestAgentDependsOnNoRelayServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/devhook/devhook/relay/wire") || !slices.Contains(deps, "github.com/devhook/devhook/relay/relayclient") {
		t.Fatalf("the agent no longer imports the relay's protocol and client: %v", deps)
	}
	for _, server := range []string{"github.com/devhook/devhook/relay", "github.com/devhook/devhook/boltrelay", "github.com/devhook/devhook/natsrelay"} {
		if slices.Contains(deps, server) {
			t.Errorf("the agent depends on %s", server)
		}
	}
}
