package agent

// The HTTP request of a forward and its answer, whichever client sends it
// (forward.go's send, or the agent's own client in httpclient.go): the
// header as sent, whether a body is sent, the answer as recorded, and a
// failure in words.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/relay/wire"
)

// hasBody reports whether a request sends a body, if only an empty one
// (Content-Length: 0).
func hasBody(method string, body []byte) bool {
	return len(body) > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// outHeader is header as sent: without hop-by-hop headers, and with an
// empty User-Agent, which sends none, rather than Go's own. It is header
// itself when that needs neither change, as most do: the relay strips
// hop-by-hop headers already, and the request only reads it.
func outHeader(header http.Header) http.Header {
	if _, ok := header["User-Agent"]; ok && !wire.HasHopByHop(header) {
		return header
	}
	// The header map is used as is: every value of repeated headers, in order.
	h := wire.EndToEnd(header)
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""}
	}
	return h
}

// setAnswer fills at with the receiver's answer resp, whose body is b, read
// up to MaxResponse+1 bytes until err. A body that is not the whole answer
// (over MaxResponse, or its read failed) is kept as far as it came, and
// at.Error says so (answerCut).
func (a *Agent) setAnswer(at *devhook.Attempt, resp *http.Response, b []byte, err error) {
	if err != nil {
		at.Error = answerReadFailed + err.Error()
	}
	if int64(len(b)) > a.cfg.MaxResponse {
		b = b[:a.cfg.MaxResponse]
		at.Error = fmt.Sprintf(answerOver+"%d bytes; the rest was dropped", a.cfg.MaxResponse)
	}
	at.Status, at.Header, at.Body = resp.StatusCode, resp.Header, b
}

// How setAnswer's at.Error begins for an answer whose body is not whole.
const (
	answerReadFailed = "reading the receiver's answer: "
	answerOver       = "the receiver's answer is over "
)

// answerCut reports whether at's body is less than the receiver's whole
// answer, as setAnswer said, in the attempt or in its record: what the
// sender gets then says so (acks.go, devhook.AnswerCutHeader).
func answerCut(at *devhook.Attempt) bool {
	return at.Status != 0 && (strings.HasPrefix(at.Error, answerReadFailed) || strings.HasPrefix(at.Error, answerOver))
}

// describe says in words why a forward failed.
func describe(err error, target string) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused: is your receiver running at " + target + "?"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout: the receiver did not answer in time"
	case errors.Is(err, context.Canceled):
		return "canceled: devhook is stopping"
	case isTLSVerifyError(err):
		return "TLS: " + tlsCause(err) + " (trust the receiver's CA with --forward-ca FILE, or skip the check with --forward-insecure)"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// isTLSVerifyError reports whether err is a receiver's certificate that
// did not verify.
func isTLSVerifyError(err error) bool {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		verify   *tls.CertificateVerificationError
	)
	return errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) || errors.As(err, &verify)
}

// tlsCause is the innermost message of a TLS error.
func tlsCause(err error) string {
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) && verify.Err != nil {
		return verify.Err.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}
