package pushpb

import _ "embed"

// OpenAPI is the OpenAPI v2 document of the HTTP/JSON Push API, generated
// from push.proto and push_http.yaml by protoc-gen-openapiv2 (`make proto`).
// Station serves it at GET /openapi.json.
//
//go:embed push.swagger.json
var OpenAPI []byte
