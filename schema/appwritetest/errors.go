package appwritetest

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Version is the Appwrite server version the emulator reports and mimics.
const Version = "1.9.6"

// apiError is Appwrite's error model: {message, code, type, version}. code is the HTTP
// status as an integer, exactly as Http::error() builds it (the spec says string; the
// server sends int).
type apiError struct {
	Status  int
	Type    string
	Message string
}

func (e *apiError) Error() string { return e.Type + ": " + e.Message }

func errf(status int, typ, format string, args ...any) *apiError {
	return &apiError{Status: status, Type: typ, Message: fmt.Sprintf(format, args...)}
}

// The error catalogue, with Appwrite's own wording where the project depends on it.
func errDocumentNotFound() *apiError {
	return errf(404, "document_not_found", "Document with the requested ID could not be found.")
}

func errDocumentExists() *apiError {
	return errf(409, "document_already_exists", "Document with the requested ID already exists. Try again with a different ID or use ID.unique() to generate a unique ID.")
}

func errCollectionNotFound() *apiError {
	return errf(404, "collection_not_found", "Collection with the requested ID could not be found.")
}

func errDatabaseNotFound() *apiError {
	return errf(404, "database_not_found", "Database not found")
}

func errAttributeNotFound() *apiError {
	return errf(404, "attribute_not_found", "Attribute with the requested ID could not be found.")
}

func errIndexNotFound() *apiError {
	return errf(404, "index_not_found", "Index with the requested ID could not be found.")
}

func errBucketNotFound() *apiError {
	return errf(404, "storage_bucket_not_found", "Storage bucket with the requested ID could not be found.")
}

func errFileNotFound() *apiError {
	return errf(404, "storage_file_not_found", "The requested file could not be found.")
}

func errUserNotFound() *apiError {
	return errf(404, "user_not_found", "User with the requested ID could not be found.")
}

func errUnauthorized() *apiError {
	return errf(401, "user_unauthorized", "The current user is not authorized to perform the requested action.")
}

func errInvalidStructure(format string, args ...any) *apiError {
	return errf(400, "document_invalid_structure", "Invalid document structure: "+format, args...)
}

func errArgument(param, format string, args ...any) *apiError {
	return errf(400, "general_argument_invalid", "Invalid `%s` param: %s", param, fmt.Sprintf(format, args...))
}

func errQuery(format string, args ...any) *apiError {
	return errf(400, "general_query_invalid", "Invalid query: "+format, args...)
}

func errRoute() *apiError {
	return errf(404, "general_route_not_found", "The requested route was not found. Please refer to the API docs and try again.")
}

func writeError(w http.ResponseWriter, err error) {
	e, ok := err.(*apiError)
	if !ok {
		e = errf(500, "general_unknown", "Server Error")
	}
	writeJSON(w, e.Status, map[string]any{
		"message": e.Message,
		"code":    e.Status,
		"type":    e.Type,
		"version": Version,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = 500
		b = []byte(`{"message":"Server Error","code":500,"type":"general_unknown","version":"` + Version + `"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func errMissingData() *apiError {
	return errf(400, "document_missing_data", "The document data is missing. Try again with document data populated")
}

func errMissingPayload() *apiError {
	return errf(400, "document_missing_payload", "The document data and permissions are missing. You must provide either document data or permissions to be updated.")
}
