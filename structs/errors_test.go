package structs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/shoenig/test/must"
)

func allCodes() []ErrorCode {
	codes := make([]ErrorCode, 0, len(knownCodes))
	for c := range knownCodes {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	return codes
}

func TestError_KnownCodes(t *testing.T) {
	// Every exported code is known to ParseError; a code missing from
	// knownCodes would arrive on the other side as an internal error.
	must.Eq(t, []ErrorCode{
		ErrCodeConflict, ErrCodeInternal, ErrCodeInvalid, ErrCodeMaxClaims, ErrCodeNoLeader,
		ErrCodeNoNodeConn, ErrCodeNotFound, ErrCodePermissionDenied, ErrCodeRetryable,
		ErrCodeTooLarge, ErrCodeUnschedulable,
	}, allCodes())
}

func TestParseError_RoundTrip(t *testing.T) {
	messages := []string{
		`volume "vol-1" not found`,
		"",
		"with: colons: inside: it",
		"multi\nline",
		"internal: looks like a code",
	}
	for _, code := range allCodes() {
		for _, msg := range messages {
			t.Run(fmt.Sprintf("%s/%q", code, msg), func(t *testing.T) {
				orig := &Error{Code: code, Message: msg}
				got := ParseError(orig.Error())
				must.Eq(t, orig, got)
				must.Eq(t, code, CodeOf(got))
				must.Eq(t, msg, MessageOf(got))
				must.Eq(t, orig.Error(), got.Error())
			})
		}
	}
}

func TestParseError_Unknown(t *testing.T) {
	cases := []string{
		"",
		"plain text",
		"unknown-code: message",
		"NOT-FOUND: case matters",
		"not-found:no space",
		"not-found",
		": empty code",
		"rpc error: code = Unavailable",
	}
	for _, text := range cases {
		t.Run(fmt.Sprintf("%q", text), func(t *testing.T) {
			got := ParseError(text)
			must.Eq(t, ErrCodeInternal, got.Code)
			must.Eq(t, text, got.Message)
		})
	}
}

func TestErrorHelpers(t *testing.T) {
	t.Run("constructors", func(t *testing.T) {
		must.Eq(t, &Error{Code: ErrCodeNotFound, Message: `volume "v" not found`}, ErrNotFound("volume %q not found", "v"))
		must.Eq(t, &Error{Code: ErrCodeInvalid, Message: "bad 3"}, ErrInvalid("bad %d", 3))
		must.Eq(t, &Error{Code: ErrCodeConflict, Message: "in use"}, ErrConflict("in use"))
		must.Eq(t, &Error{Code: ErrCodeMaxClaims, Message: "x"}, NewError(ErrCodeMaxClaims, "x"))
		must.Eq(t, "not-found: gone", ErrNotFound("gone").Error())
	})

	t.Run("CodeOf and MessageOf", func(t *testing.T) {
		must.Eq(t, ErrorCode(""), CodeOf(nil))
		must.Eq(t, "", MessageOf(nil))
		must.Eq(t, ErrCodeInternal, CodeOf(io.EOF))
		must.Eq(t, "EOF", MessageOf(io.EOF))
		wrapped := fmt.Errorf("calling: %w", ErrConflict("in use"))
		must.Eq(t, ErrCodeConflict, CodeOf(wrapped))
		must.Eq(t, "in use", MessageOf(wrapped))
	})

	t.Run("Wrap keeps the code", func(t *testing.T) {
		for _, code := range allCodes() {
			err := Wrap(NewError(code, "inner"), "volume %q", "v")
			must.Eq(t, code, CodeOf(err))
			must.Eq(t, `volume "v": inner`, MessageOf(err))
			must.Eq(t, string(code)+`: volume "v": inner`, err.Error())
		}
		must.NoError(t, Wrap(nil, "nothing"))
		plain := Wrap(io.ErrUnexpectedEOF, "read")
		must.Eq(t, ErrCodeInternal, CodeOf(plain))
		must.Eq(t, "read: unexpected EOF", MessageOf(plain))
		twice := Wrap(Wrap(ErrNotFound("x"), "b"), "a")
		must.Eq(t, "not-found: a: b: x", twice.Error())
	})

	t.Run("errors.Is on code", func(t *testing.T) {
		err := fmt.Errorf("outer: %w", NewError(ErrCodeMaxClaims, "volume max claims reached"))
		must.ErrorIs(t, err, &Error{Code: ErrCodeMaxClaims})
		must.False(t, errors.Is(err, &Error{Code: ErrCodeConflict}))
		must.False(t, errors.Is(err, &Error{Code: ErrCodeMaxClaims, Message: "something else"}))
		must.False(t, errors.Is(io.EOF, &Error{Code: ErrCodeInternal}))

		// A sentinel that crossed the wire is a new value, and still matches.
		overWire := ParseError(ErrNoLeader.Error())
		must.ErrorIs(t, overWire, ErrNoLeader)
		must.ErrorIs(t, overWire, &Error{Code: ErrCodeNoLeader})
		must.False(t, errors.Is(overWire, ErrPermissionDenied))
		must.ErrorIs(t, ParseError(ErrPermissionDenied.Error()), ErrPermissionDenied)
		must.ErrorIs(t, Wrap(ErrNoLeader, "forward"), &Error{Code: ErrCodeNoLeader})
	})

	t.Run("errors.As", func(t *testing.T) {
		var e *Error
		must.True(t, errors.As(fmt.Errorf("x: %w", ErrNotFound("gone")), &e))
		must.Eq(t, ErrCodeNotFound, e.Code)
	})
}

func TestIsRetryable(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"nil":               {nil, false},
		"plain":             {io.EOF, false},
		"no leader":         {ErrNoLeader, true},
		"no leader wrapped": {fmt.Errorf("forward: %w", ErrNoLeader), true},
		"no leader on wire": {ParseError(ErrNoLeader.Error()), true},
		"retryable":         {NewError(ErrCodeRetryable, "plugin busy"), true},
		"retryable wrapped": {Wrap(NewError(ErrCodeRetryable, "plugin busy"), "attach"), true},
		"not found":         {ErrNotFound("x"), false},
		"conflict":          {ErrConflict("x"), false},
		"max claims":        {NewError(ErrCodeMaxClaims, "x"), false},
		"no path to node":   {NewError(ErrCodeNoNodeConn, "x"), false},
		"internal":          {NewError(ErrCodeInternal, "x"), false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			must.Eq(t, tc.want, IsRetryable(tc.err))
		})
	}
}

func TestMultiError(t *testing.T) {
	t.Run("empty is nil", func(t *testing.T) {
		var m MultiError
		must.NoError(t, m.ErrorOrNil("subject"))
		must.Eq(t, 0, m.Len())
		m.AddErr(nil)
		must.NoError(t, m.ErrorOrNil("subject"))
	})

	t.Run("joins every problem", func(t *testing.T) {
		var m MultiError
		m.Add("first %d", 1)
		m.AddErr(ErrInvalid("second"))
		m.AddErr(errors.New("third"))
		must.Eq(t, 3, m.Len())
		err := m.ErrorOrNil("volume \"v\"")
		must.Eq(t, ErrCodeInvalid, CodeOf(err))
		must.Eq(t, `volume "v": first 1; second; third`, MessageOf(err))
		must.Eq(t, `invalid: volume "v": first 1; second; third`, err.Error())
	})

	t.Run("no subject", func(t *testing.T) {
		var m MultiError
		m.Add("only")
		must.Eq(t, "invalid: only", m.ErrorOrNil("").Error())
	})

	t.Run("round trips over the wire", func(t *testing.T) {
		var m MultiError
		m.Add("a: b")
		m.Add("c")
		err := m.ErrorOrNil("s")
		must.Eq(t, err, error(ParseError(err.Error())))
	})
}

func TestWrap_KeepsTheCause(t *testing.T) {
	err := Wrap(Wrap(fmt.Errorf("call: %w", context.DeadlineExceeded), "node detach"), "volume %q", "v")
	must.ErrorIs(t, err, context.DeadlineExceeded, must.Sprint("errors.Is reaches the cause through every Wrap"))
	must.Eq(t, ErrCodeInternal, CodeOf(err))
	must.Eq(t, `volume "v": node detach: call: context deadline exceeded`, MessageOf(err))
	wire := ParseError(err.Error())
	must.Nil(t, errors.Unwrap(wire), must.Sprint("only the code and the message cross the wire"))
}
