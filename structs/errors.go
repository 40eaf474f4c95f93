package structs

import (
	"errors"
	"fmt"
	"strings"
)

// ErrorCode is the kind of an error as it crosses the RPC boundary. Callers
// switch on the code; they never match an error's text.
type ErrorCode string

const (
	ErrCodeInternal         ErrorCode = "internal"
	ErrCodeNotFound         ErrorCode = "not-found"
	ErrCodeInvalid          ErrorCode = "invalid"
	ErrCodeConflict         ErrorCode = "conflict"
	ErrCodeMaxClaims        ErrorCode = "max-claims"
	ErrCodeUnschedulable    ErrorCode = "unschedulable"
	ErrCodePermissionDenied ErrorCode = "permission-denied"
	ErrCodeNoLeader         ErrorCode = "no-leader"
	ErrCodeNoNodeConn       ErrorCode = "no-path-to-node"
	ErrCodeRetryable        ErrorCode = "retryable"
	ErrCodeTooLarge         ErrorCode = "too-large"
)

var knownCodes = map[ErrorCode]struct{}{
	ErrCodeInternal: {}, ErrCodeNotFound: {}, ErrCodeInvalid: {}, ErrCodeConflict: {},
	ErrCodeMaxClaims: {}, ErrCodeUnschedulable: {}, ErrCodePermissionDenied: {},
	ErrCodeNoLeader: {}, ErrCodeNoNodeConn: {}, ErrCodeRetryable: {}, ErrCodeTooLarge: {},
}

// Error is the typed error of every RPC. Its Error() text is "code: message",
// which is also its wire form: net/rpc carries only a string, and ParseError
// turns that string back into an *Error on the caller's side. That is the one
// place the mapping happens.
type Error struct {
	Code    ErrorCode
	Message string
	// Cause is the error this one was made from (Wrap keeps it), so that
	// errors.Is and errors.As still find it: a context's deadline, a
	// connection error. It stays on this side of the wire: only the code
	// and the message cross it.
	Cause error `codec:"-" json:"-"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the cause, nil when there is none.
func (e *Error) Unwrap() error { return e.Cause }

// Is lets errors.Is(err, &Error{Code: X}) match on the code alone, and
// errors.Is(err, ErrNoLeader) match a sentinel that crossed the wire (and so
// is no longer the same pointer) by its code and message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// NewError builds a typed error with a formatted message.
func NewError(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Convenience constructors for the common codes.
func ErrNotFound(format string, args ...any) *Error {
	return NewError(ErrCodeNotFound, format, args...)
}
func ErrInvalid(format string, args ...any) *Error { return NewError(ErrCodeInvalid, format, args...) }
func ErrConflict(format string, args ...any) *Error {
	return NewError(ErrCodeConflict, format, args...)
}

// Sentinel errors for codes whose message says all there is to say.
var (
	ErrNoLeader = &Error{Code: ErrCodeNoLeader, Message: "no cluster leader"}
	// ErrPermissionDenied is a token's lack of a capability, in Nomad's
	// words, which are also the whole body of the HTTP 403.
	ErrPermissionDenied = &Error{Code: ErrCodePermissionDenied, Message: "Permission denied"}
	// ErrTokenNotFound and ErrTokenExpired are a token that does not
	// resolve: unknown (or malformed), or past its expiration time.
	ErrTokenNotFound = &Error{Code: ErrCodePermissionDenied, Message: "ACL token not found"}
	ErrTokenExpired  = &Error{Code: ErrCodePermissionDenied, Message: "ACL token expired"}
)

// CodeOf returns the code of err: the code of the first *Error in its chain,
// ErrCodeInternal for any other non-nil error, and "" for nil.
func CodeOf(err error) ErrorCode {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ErrCodeInternal
}

// MessageOf returns the human message of err, without the code prefix.
func MessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// Wrap prefixes context to err's message and keeps its code, and err as
// its cause. A plain error becomes an internal one.
func Wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	prefix := fmt.Sprintf(format, args...)
	return &Error{Code: CodeOf(err), Message: prefix + ": " + MessageOf(err), Cause: err}
}

// ParseError rebuilds a typed error from its wire text. Text that does not
// start with a known code stays an internal error with the text as message.
func ParseError(text string) *Error {
	code, msg, ok := strings.Cut(text, ": ")
	if ok {
		if _, known := knownCodes[ErrorCode(code)]; known {
			return &Error{Code: ErrorCode(code), Message: msg}
		}
	}
	return &Error{Code: ErrCodeInternal, Message: text}
}

// IsRetryable reports whether an RPC that failed with err may be tried again
// without risk: nothing can have been committed.
func IsRetryable(err error) bool {
	switch CodeOf(err) {
	case ErrCodeNoLeader, ErrCodeRetryable:
		return true
	}
	return false
}

// MultiError joins validation problems into one error whose message lists
// them all.
type MultiError struct {
	Errors []string
}

// Add records one problem.
func (m *MultiError) Add(format string, args ...any) {
	m.Errors = append(m.Errors, fmt.Sprintf(format, args...))
}

// AddErr records err's message, if err is not nil.
func (m *MultiError) AddErr(err error) {
	if err != nil {
		m.Errors = append(m.Errors, MessageOf(err))
	}
}

// Len is the number of problems recorded.
func (m *MultiError) Len() int { return len(m.Errors) }

// ErrorOrNil returns an invalid-input error listing every problem, prefixed
// by subject, or nil when there were none.
func (m *MultiError) ErrorOrNil(subject string) error {
	if len(m.Errors) == 0 {
		return nil
	}
	msg := strings.Join(m.Errors, "; ")
	if subject != "" {
		msg = subject + ": " + msg
	}
	return &Error{Code: ErrCodeInvalid, Message: msg}
}
