// Package notification turns the notification content of a Push request
// (pushpb.Notification) into what the providers receive, and checks it
// against their limits: an APNs payload of at most 4 KB, FCM data of at most
// 4 KB. Station validates with it before anything is queued; horn builds the
// provider payloads with it.
package notification

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// Provider limits.
const (
	APNsMaxPayload = 4096 // bytes of the JSON payload
	FCMMaxData     = 4096 // bytes of data keys and values
	MaxTTLSeconds  = 28 * 24 * 3600
)

// FieldError is bad content; Field names the request field at fault.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: "notification." + field, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks content against both providers' limits.
func Validate(n *pushpb.Notification) error {
	if n == nil {
		return nil
	}
	if n.GetTtlSeconds() < 0 || n.GetTtlSeconds() > MaxTTLSeconds {
		return invalid("ttl_seconds", "%d, must be 0 to %d", n.GetTtlSeconds(), MaxTTLSeconds)
	}
	if n.Badge != nil && n.GetBadge() < 0 {
		return invalid("badge", "%d, must not be negative", n.GetBadge())
	}
	for k := range n.GetData() {
		if k == "" || k == "aps" || k == "from" || k == "message_type" {
			return invalid("data", "key %q is reserved by APNs or FCM", k)
		}
	}
	if size := FCMDataSize(n); size > FCMMaxData {
		return invalid("data", "%d bytes of data, FCM allows at most %d", size, FCMMaxData)
	}
	p, err := APNs(n)
	if err != nil {
		return invalid("data", "%v", err)
	}
	if len(p) > APNsMaxPayload {
		// Name the larger part: the data, or the visible text.
		field := "body"
		if FCMDataSize(n) > len(n.GetTitle())+len(n.GetBody()) {
			field = "data"
		}
		return invalid(field, "the APNs payload would be %d bytes, at most %d", len(p), APNsMaxPayload)
	}
	return nil
}

// FCMDataSize is the size FCM counts for the data map: keys plus values.
func FCMDataSize(n *pushpb.Notification) int {
	size := 0
	for k, v := range n.GetData() {
		size += len(k) + len(v)
	}
	return size
}

// Resolve returns the content to show for msgs: c itself when it has a
// body, else a copy of c whose body is the first StringValue message (so a
// plain text push, or one with only a title, still shows the text).
func Resolve(c *pushpb.Notification, msgs []*msgpb.Message) *pushpb.Notification {
	if c.GetBody() != "" {
		return c
	}
	for _, m := range msgs {
		var s wrapperspb.StringValue
		if m.GetBody().MessageIs(&s) && m.GetBody().UnmarshalTo(&s) == nil && s.GetValue() != "" {
			out := &pushpb.Notification{}
			if c != nil {
				out = proto.CloneOf(c)
			}
			out.Body = s.GetValue()
			return out
		}
	}
	return c
}

// apsAlert and aps are the APNs "aps" dictionary.
type apsAlert struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
}

type aps struct {
	Alert *apsAlert `json:"alert,omitempty"`
	Sound string    `json:"sound,omitempty"`
	Badge *int32    `json:"badge,omitempty"`
	// ContentAvailable marks a notification with nothing to show.
	ContentAvailable int `json:"content-available,omitempty"`
}

// APNs builds the JSON payload: {"aps":{"alert":{"title","body"},"sound",
// "badge"}, <data keys>…}; content without title and body is a background
// notification ("content-available": 1).
func APNs(n *pushpb.Notification) ([]byte, error) {
	root := make(map[string]any, len(n.GetData())+2)
	for k, v := range n.GetData() {
		root[k] = v
	}
	a := aps{Sound: n.GetSound(), Badge: n.Badge}
	if n.GetTitle() != "" || n.GetBody() != "" {
		a.Alert = &apsAlert{Title: n.GetTitle(), Body: n.GetBody()}
	} else {
		a.ContentAvailable = 1
	}
	root["aps"] = a
	return json.Marshal(root)
}
