package schema

// Runtime API (issue 19 item 2): the keys an admin issues to host applications and the
// links an admin makes from an app's user to an existing member. Both are server only.
const (
	CollRuntimeKeys  = "runtime_keys"
	CollRuntimeLinks = "runtime_links"
)

// RuntimeKey is a key a host application calls the runtime API with. The secret itself
// is never stored: SecretHash is the hex SHA-256 of the whole secret (runtimeapi).
type RuntimeKey struct {
	Meta
	AppID        string   `json:"appId"`
	Name         string   `json:"name"`
	SecretHash   string   `json:"secretHash"`
	Roles        []string `json:"roles"`
	RateLimit    int64    `json:"rateLimit"`    // calls per window
	RateWindowMs int64    `json:"rateWindowMs"` // the window
	CreatedBy    string   `json:"createdBy"`
	RevokedAt    *string  `json:"revokedAt"`
	// UserIssuer, with UserJWKS (a public key set, JSON) or UserJWKSURL, makes the key
	// speak for a user only through a JWT that issuer signed (X-App-User-Token): the
	// bare X-App-User header is refused. Nil on keys without registered user keys.
	UserIssuer  *string `json:"userIssuer,omitempty"`
	UserJWKS    *string `json:"userJwks,omitempty"`
	UserJWKSURL *string `json:"userJwksUrl,omitempty"`
	// Environment the key belongs to (runtimeapi.Identity.Env); nil: production.
	Environment *string `json:"environment,omitempty"`
}

// RuntimeLink maps an app's user (appId, external id) to an existing member; its
// document id is derived from both (runtimeapi.LinkID).
type RuntimeLink struct {
	Meta
	AppID      string `json:"appId"`
	ExternalID string `json:"externalId"`
	UserID     string `json:"userId"`
	CreatedBy  string `json:"createdBy"`
}

func runtimeCollections() []Collection {
	return []Collection{
		{
			ID: CollRuntimeKeys, Name: "Runtime keys", DocumentSecurity: true,
			Attributes: []Attribute{
				str("appId", SizeAppID, true),
				str("name", SizeTitle, true),
				str("secretHash", 64, true),
				{Key: "roles", Type: TypeString, Size: SizeRole, Array: true},
				integer("rateLimit", true, 1, 1_000_000),
				integer("rateWindowMs", true, 1000, 86_400_000),
				str("createdBy", SizeID, true),
				when("revokedAt", false),
				// The app's own user-token issuer and its keys (RuntimeKey.UserIssuer).
				str("userIssuer", SizeURL, false),
				str("userJwks", SizeUserJWKS, false),
				str("userJwksUrl", SizeURL, false),
				// The key's environment (nil: production); its data is separate.
				str("environment", 16, false),
			},
			Indexes: []Index{{Key: "app", Type: IndexKey, Attributes: []string{"appId"}}},
		},
		{
			ID: CollRuntimeLinks, Name: "Runtime links", DocumentSecurity: true,
			Attributes: []Attribute{
				str("appId", SizeAppID, true),
				str("externalId", SizeExternalID, true),
				str("userId", SizeID, true),
				str("createdBy", SizeID, true),
			},
		},
	}
}

// Sizes of the runtime API's identifiers.
const (
	SizeAppID      = 24
	SizeExternalID = 128
	// SizeUserJWKS holds an app's public key set inline (a few RSA keys); a TEXT on
	// MariaDB.
	SizeUserJWKS = 20000
)
