package runtimeapi_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/runtimeapi"
)

func TestParseMetadata(t *testing.T) {
	sixteen := map[string]string{}
	for i := 0; i < 16; i++ {
		sixteen[strings.Repeat("k", i+1)] = strings.Repeat("é", 512) // characters, not bytes
	}
	full, _ := json.Marshal(sixteen)
	for _, tc := range []struct {
		name, in, want string
		bad            bool
	}{
		{"absent", ``, ``, false},
		{"null", `null`, ``, false},
		{"empty", `{}`, ``, false},
		{"sorted", `{"b":"2","a":"1"}`, `{"a":"1","b":"2"}`, false},
		{"limits", string(full), string(full), false},
		{"number value", `{"a":1}`, ``, true},
		{"null value", `{"a":null}`, ``, true},
		{"array", `["a"]`, ``, true},
		{"string", `"a"`, ``, true},
		{"empty key", `{"":"v"}`, ``, true},
		{"long key", `{"` + strings.Repeat("k", 65) + `":"v"}`, ``, true},
		{"long value", `{"k":"` + strings.Repeat("v", 513) + `"}`, ``, true},
		{"17 keys", `{"a":"","b":"","c":"","d":"","e":"","f":"","g":"","h":"","i":"","j":"","k":"","l":"","m":"","n":"","o":"","p":"","q":""}`, ``, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := runtimeapi.ParseMetadata(json.RawMessage(tc.in))
			if tc.bad {
				require.True(t, errors.Is(err, runtimeapi.ErrMetadata), "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.LessOrEqual(t, len([]rune(got)), 60000)
		})
	}
	require.Equal(t, map[string]string{}, runtimeapi.Metadata(nil))
	s := `{"a":"1"}`
	require.Equal(t, map[string]string{"a": "1"}, runtimeapi.Metadata(&s))
}
