package inspector

import (
	"net/http"

	"github.com/devhook/devhook"
)

// SettingsView is the answer of GET /api/settings.
type SettingsView struct {
	Forward []string `json:"forward"`
	// Routes are listen's routes, in order; what none matches goes to
	// Forward.
	Routes          []devhook.Route `json:"routes"`
	RelayURL        string          `json:"relay_url"`
	PublicURL       string          `json:"public_url"`
	Channel         string          `json:"channel"`
	SecretKnown     bool            `json:"secret_known"`
	Verify          string          `json:"verify"`
	ReplayAvailable bool            `json:"replay_available"`
	// Data is the data directory whose store this inspector serves.
	Data string `json:"data,omitempty"`
}

func (s *Server) handleSettings(w http.ResponseWriter, r *http.Request) {
	st := s.cfg.Settings
	v := SettingsView{
		Forward: st.Forward, Routes: st.Routes, RelayURL: st.RelayURL, PublicURL: st.PublicURL, Channel: st.Channel,
		SecretKnown: s.secretKnown(), Verify: st.Verify, ReplayAvailable: s.cfg.Replayer != nil, Data: st.DataDir,
	}
	if v.Forward == nil {
		v.Forward = []string{}
	}
	if v.Routes == nil {
		v.Routes = []devhook.Route{}
	}
	if v.Verify == "" {
		v.Verify = "report"
	}
	writeJSON(w, http.StatusOK, v)
}
