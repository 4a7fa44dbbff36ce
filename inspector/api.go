package inspector

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/devhook/devhook"
)

type errorBody struct {
	Error string `json:"error"`
}

// statusOf maps a devhook error code to an HTTP status.
func statusOf(err error) int {
	switch devhook.ErrorCode(err) {
	case devhook.ENOTFOUND:
		return http.StatusNotFound
	case devhook.EINVALID:
		return http.StatusBadRequest
	case devhook.ECONFLICT:
		return http.StatusConflict
	case devhook.EUNAUTH:
		return http.StatusUnauthorized
	case devhook.ETOOLARGE:
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusInternalServerError
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorBody{Error: "encoding the answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError answers with err's message; internal errors keep their
// message too, since the only reader is the developer on this machine.
func writeError(w http.ResponseWriter, err error) {
	var e *devhook.Error
	msg := err.Error()
	if errors.As(err, &e) && e.Code != devhook.EINTERNAL {
		msg = e.Message
	}
	writeJSON(w, statusOf(err), errorBody{Error: msg})
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if statusOf(err) >= 500 {
		s.cfg.Logf("inspector: %s %s: %v", r.Method, r.URL.Path, err)
	}
	writeError(w, err)
}
