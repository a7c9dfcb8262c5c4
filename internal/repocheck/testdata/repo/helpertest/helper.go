package helpertest

import (
	"net/http"
	"net/http/httptest"
)

func Start() *httptest.Server { return httptest.NewServer(http.NotFoundHandler()) }
