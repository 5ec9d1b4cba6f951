package auth

// DevSecret is the JWT secret `gomsg dev` and gomsgctl default to. It is
// public: never use it outside a developer's machine. It lives here, not in
// internal/app, so that gomsgctl can default to it without linking the
// services and their backend clients.
const DevSecret = "gomsg-dev-secret-do-not-use-in-production"
