package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
)

// httpPost posts body with the test's API key.
func httpPost(url, body string) (*http.Response, error) {
	return httpPostAuth(url, body, "Bearer "+apiKey)
}

// httpPostAuth posts body with this authorization header ("": none).
func httpPostAuth(url, body, authz string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	return http.DefaultClient.Do(req)
}

func decodeJSON(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
