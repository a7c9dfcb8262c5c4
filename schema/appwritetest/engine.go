package appwritetest

import (
	"fmt"
	"os"
	"strings"
)

// Engine selects which storage engine behind Appwrite 1.9.6 the emulator models. The
// facts behind each profile, with their upstream file:line, are in doc.go.
type Engine string

const (
	// EngineIdeal is the emulator's original behaviour: one idealised database (unique
	// indexes over any types, case-sensitive ids and strings, integer $sequence) with no
	// abuse limits. Only tests that assert that idealised behaviour choose it, and say so.
	EngineIdeal Engine = "ideal"
	// EngineMongoDB models Appwrite 1.9.6 on MongoDB (_APP_DB_ADAPTER=mongodb, the 1.9.x
	// default) through utopia-php/database 6.0.0's Mongo adapter. It is the emulator's
	// default too (issue 12): tests, make emulator and make dev run on it.
	EngineMongoDB Engine = "mongodb"
	// EngineMariaDB models Appwrite 1.9.6 on MariaDB 10.11 (utf8mb4, a case-insensitive
	// collation) through utopia-php/database 6.0.0's MariaDB adapter.
	EngineMariaDB Engine = "mariadb"
)

// EngineEnv is the environment variable NewTestServer (and cmd/appwrite-emulator's
// -engine default) reads when no engine is chosen explicitly, so a whole test suite can
// be switched: PA_APPWRITE_ENGINE=mongodb go test ./...
const EngineEnv = "PA_APPWRITE_ENGINE"

// Engines lists the engine names ParseEngine accepts.
var Engines = []Engine{EngineIdeal, EngineMongoDB, EngineMariaDB}

// DefaultEngine is the engine modelled when none is chosen: MongoDB, as in Appwrite 1.9.6
// (_APP_DB_ADAPTER defaults to mongodb: .env:37, app/init/registers.php:155).
const DefaultEngine = EngineMongoDB

// ParseEngine turns a name into an Engine; "" is DefaultEngine.
func ParseEngine(s string) (Engine, error) {
	switch e := Engine(strings.ToLower(strings.TrimSpace(s))); e {
	case "":
		return DefaultEngine, nil
	case EngineIdeal, EngineMongoDB, EngineMariaDB:
		return e, nil
	}
	return "", fmt.Errorf("appwritetest: unknown engine %q (want one of ideal, mongodb, mariadb)", s)
}

// EngineFromEnv reads EngineEnv; unset or empty is DefaultEngine.
func EngineFromEnv() (Engine, error) { return ParseEngine(os.Getenv(EngineEnv)) }

// StorageDevice is the storage device type behind the buckets (_APP_STORAGE_DEVICE).
type StorageDevice string

const (
	// DeviceLocal is the local disk device: a file's signature is the MD5 of its content.
	DeviceLocal StorageDevice = "local"
	// DeviceS3 is any S3-type device (s3, dospaces, backblaze, linode, wasabi): a file's
	// signature is the object's ETag, which for a chunked (multipart) upload is not an MD5
	// of the content.
	DeviceS3 StorageDevice = "s3"
)

// profile is what differs between engines. Every flag is one upstream fact (doc.go).
type profile struct {
	engine Engine
	// mongoPartialUnique: a unique index only holds documents whose every indexed field is
	// stored as a BSON string (the partial filter of Mongo.php createIndex).
	mongoPartialUnique bool
	// idFoldUnique: document and file ids are unique regardless of case.
	idFoldUnique bool
	// idFoldLookup: reading a document or file by id ignores case (SQL WHERE _uid = ?
	// under a _ci collation). On MongoDB the lookup is exact.
	idFoldLookup bool
	// foldStrings: string equality, LIKE (contains/startsWith/endsWith), ordering and
	// unique indexes compare strings case-insensitively (MariaDB _ci collation).
	foldStrings bool
	// mongoRegex: contains is a case-insensitive unanchored regex; startsWith and
	// endsWith are case-sensitive unanchored regexes (i.e. substring matches).
	mongoRegex bool
	// uuidSequence: $sequence is a UUIDv7 (48-bit millisecond time + random bits); the
	// 1.8 response format renders it as 0.
	uuidSequence bool
	// realUploadResume: a chunk re-sent for a completed upload answers 200 with the file;
	// a chunk without x-appwrite-id uses the form's fileId.
	realUploadResume bool
	// realDocumentWrites: empty create → document_missing_data, empty update →
	// document_missing_payload; update and delete look the document up without read
	// permission; an update that changes nothing needs read permission and keeps
	// $updatedAt.
	realDocumentWrites bool
	// rowWidth: an attribute is refused once the collection's estimated row width would
	// reach 65,535 bytes (MariaDB; MongoDB has no document size limit here).
	rowWidth bool
	// rateLimits are the abuse limits on by default.
	rateLimits RateLimits
}

func profileFor(e Engine) profile {
	switch e {
	case EngineMongoDB:
		return profile{engine: e, mongoPartialUnique: true, idFoldUnique: true, mongoRegex: true,
			uuidSequence: true, realUploadResume: true, realDocumentWrites: true, rateLimits: UpstreamRateLimits()}
	case EngineMariaDB:
		return profile{engine: e, idFoldUnique: true, idFoldLookup: true, foldStrings: true,
			realUploadResume: true, realDocumentWrites: true, rowWidth: true, rateLimits: UpstreamRateLimits()}
	}
	return profile{engine: EngineIdeal}
}

// Engine reports the engine this emulator models.
func (s *Server) Engine() Engine { return s.prof.engine }
