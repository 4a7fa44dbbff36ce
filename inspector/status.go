package inspector

import (
	"net/http"

	"github.com/devhook/devhook"
)

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	var h devhook.Health
	if s.cfg.Health != nil {
		h = s.cfg.Health()
	}
	writeJSON(w, http.StatusOK, h)
}
