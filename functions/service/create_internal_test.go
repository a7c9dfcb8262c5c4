package service

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/fault"
	"privateassistant/schema"
)

// TestParseCreateNamesTheParameterAtFault: the runtime API's create is parsed apart from
// its admission (a thin handler); each refusal has its kind, code and parameter.
func TestParseCreateNamesTheParameterAtFault(t *testing.T) {
	long := strings.Repeat("x", schema.SizeMessageText+1)
	for _, tc := range []struct {
		body, idem string
		kind       fault.Kind
		code       string
		param      string
	}{
		{`[1]`, "", fault.Invalid, "invalid_json", ""},
		{`{"model":"chat","input":"hi","tools":[{}]}`, "", fault.Invalid, "unsupported_parameter", "tools"},
		{`{"model":"chat","input":"hi","stream":true}`, "", fault.Invalid, "unsupported_parameter", "stream"},
		{`{"model":"chat","input":"hi","background":false}`, "", fault.Invalid, "background_required", "background"},
		{`{"model":"Chat!","input":"hi"}`, "", fault.Invalid, "invalid_model", "model"},
		{`{"model":"chat","input":"hi","metadata":{"k":1}}`, "", fault.Invalid, "invalid_metadata", "metadata"},
		{`{"model":"chat","input":"  "}`, "", fault.Invalid, "invalid_input", "input"},
		{`{"model":"chat","input":[{"role":"system","content":"x"}]}`, "", fault.Invalid, "unsupported_input", "input"},
		{`{"model":"chat","input":"` + long + `"}`, "", fault.TooLarge, "text_too_long", "input"},
		{`{"model":"chat","input":"hi"}`, strings.Repeat("k", 257), fault.Invalid, "invalid_idempotency_key", ""},
	} {
		_, err := parseCreate([]byte(tc.body), tc.idem)
		f := fault.As(err)
		require.NotNil(t, f, "%.60s: %v", tc.body, err)
		require.Equal(t, tc.kind, f.Kind, tc.body)
		require.Equal(t, tc.code, f.Code, "%.60s: %v", tc.body, err)
		require.Equal(t, tc.param, f.Param, tc.body)
	}

	req, err := parseCreate([]byte(`{"model":"chat","input":"hello","metadata":{"k":"v"}}`), "")
	require.NoError(t, err)
	require.Nil(t, req.approval)
	require.Equal(t, "hello", req.text)
	require.Len(t, req.idem, 32, "a random key when the caller sent none")
	again, err := parseCreate([]byte(`{"model":"chat","input":"hello"}`), "")
	require.NoError(t, err)
	require.NotEqual(t, req.idem, again.idem)
	kept, err := parseCreate([]byte(`{"model":"chat","input":"hello"}`), "mine")
	require.NoError(t, err)
	require.Equal(t, "mine", kept.idem)
}
