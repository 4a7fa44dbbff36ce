package inspector

import (
	"github.com/devhook/devhook"
)

// Delivery ids by prefix: every endpoint that takes a delivery id takes
// the start of one too, when only one recorded id starts with it
// (Store.Resolve: storage.DB.Resolve). An ambiguous prefix is answered 409,
// the message naming some of the ids it starts; a missing one, 404.

// delivery returns the delivery whose id is ref or starts with it.
func (s *Server) delivery(ref string) (*devhook.Delivery, error) {
	d, err := s.cfg.Store.Delivery(ref)
	if devhook.ErrorCode(err) != devhook.ENOTFOUND {
		return d, err
	}
	id, rerr := s.cfg.Store.Resolve(ref)
	if rerr != nil {
		return nil, rerr
	}
	return s.cfg.Store.Delivery(id)
}
