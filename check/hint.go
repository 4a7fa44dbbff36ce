package check

import (
	"github.com/devhook/devhook"
	"github.com/devhook/devhook/hint"
)

// The hint moved to package hint. These names forward to it for the one
// caller outside this change's packages (agent/replay_test.go); remove
// them once it imports hint.

// HintEditedNotResigned is hint.EditedNotResigned.
const HintEditedNotResigned = hint.EditedNotResigned

// HintContext is hint.Context.
type HintContext = hint.Context

// Advise is hint.Advise.
func Advise(d *devhook.Delivery, a *devhook.Attempt, hc HintContext) hint.Advice {
	return hint.Advise(d, a, hc)
}
