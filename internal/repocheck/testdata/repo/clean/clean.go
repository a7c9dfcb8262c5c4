package clean

import "privateassistant/internal/startstop"

type C struct{ r startstop.Runner }
