package hermes

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStreamFraming(t *testing.T) {
	raw := "data: {\"event\": \"message.delta\", \"run_id\": \"run_1\", \"timestamp\": 1.5, \"delta\": \"Hel\"}\n\n" +
		": keepalive\n\n" +
		"data: {\"event\": \"tool.completed\", \"run_id\": \"run_1\", \"timestamp\": 2, \"tool\": \"terminal\", \"duration\": 0.412, \"error\": false}\r\n\r\n" +
		"data: not json\n\n" +
		"event: ignored\ndata: {\"event\": \"run.completed\", \"run_id\": \"run_1\", \"timestamp\": 3, \"output\": \"Hello\\u00e9\"}\n\n" +
		": stream closed\n\n"
	s := NewStream(io.NopCloser(strings.NewReader(raw)))
	e, err := s.Next()
	require.NoError(t, err)
	require.Equal(t, "message.delta", e.Type)
	require.Equal(t, "Hel", e.String("delta"))
	require.Equal(t, 1.5, e.Timestamp)
	e, err = s.Next()
	require.NoError(t, err)
	require.Equal(t, "terminal", e.String("tool"))
	require.False(t, e.Bool("error"))
	require.Equal(t, 0.412, e.Float("duration"))
	_, err = s.Next()
	require.ErrorIs(t, err, ErrMalformed)
	e, err = s.Next()
	require.NoError(t, err)
	require.Equal(t, "Helloé", e.String("output"))
	_, err = s.Next()
	require.ErrorIs(t, err, ErrStreamClosed)

	// EOF without ": stream closed" is a dropped stream.
	s = NewStream(io.NopCloser(strings.NewReader("data: {\"event\": \"message.delta\", \"delta\": \"x\"}\n\n")))
	_, err = s.Next()
	require.NoError(t, err)
	_, err = s.Next()
	require.True(t, errors.Is(err, io.ErrUnexpectedEOF))
}

func FuzzStream(f *testing.F) {
	f.Add("data: {\"event\": \"message.delta\", \"delta\": \"x\"}\n\n: stream closed\n")
	f.Add("data: {\"event\":1}\n\ndata:\ndata: {}\n\n")
	f.Add(": keepalive\n\ndata: [DONE]\n\n")
	f.Fuzz(func(t *testing.T, raw string) {
		s := NewStream(io.NopCloser(strings.NewReader(raw)))
		for i := 0; i < 1000; i++ {
			e, err := s.Next()
			if err == nil {
				require.NotEmpty(t, e.Type)
				continue
			}
			if errors.Is(err, ErrMalformed) {
				continue
			}
			return // EOF, dropped or closed
		}
	})
}

func TestStreamSeq(t *testing.T) {
	raw := ": open\n\n" +
		"id: 0\ndata: {\"event\": \"message.delta\", \"delta\": \"a\", \"seq\": 0}\n\n" +
		"id: 7\ndata: {\"event\": \"message.delta\", \"delta\": \"b\"}\n\n" +
		"data: {\"event\": \"replay.truncated\", \"oldest_retained_seq\": 3}\n\n" +
		": stream closed\n\n"
	s := NewStream(io.NopCloser(strings.NewReader(raw)))
	e, err := s.Next()
	require.NoError(t, err)
	require.EqualValues(t, 0, e.Seq)
	e, err = s.Next()
	require.NoError(t, err)
	require.EqualValues(t, 7, e.Seq, "from the id: line when the data has no seq")
	require.EqualValues(t, 7, s.LastSeq())
	e, err = s.Next()
	require.NoError(t, err)
	require.EqualValues(t, -1, e.Seq, "an unnumbered frame")
	require.EqualValues(t, 7, s.LastSeq())
	_, err = s.Next()
	require.ErrorIs(t, err, ErrStreamClosed)
}
