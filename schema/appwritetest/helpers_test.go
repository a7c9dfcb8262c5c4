package appwritetest_test

import (
	"bytes"
	"mime/multipart"
	"net/http/httptest"
	"testing"

	"privateassistant/schema/appwritetest"
)

func newMultipart(buf *bytes.Buffer) *multipart.Writer { return multipart.NewWriter(buf) }

func serve(t *testing.T, s *appwritetest.Server) string {
	t.Helper()
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return hs.URL + "/v1"
}
