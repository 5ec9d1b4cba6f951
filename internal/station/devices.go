package station

import (
	"context"
	"errors"
	"slices"
	"strings"
	"unicode"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/notification"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// Providers horn knows; a platform's notifier must be one of them.
var knownProviders = []string{"apns", "fcm", "log"}

const maxTokenBytes = 1024

// RegisterDevice records a device token. Registering the same token again
// overwrites the one entry (only app_id and the time change); a new token
// beyond --max-devices-per-uid evicts the uid's oldest.
func (s *Station) RegisterDevice(ctx context.Context, d *pushpb.Device) error {
	dev, err := s.validDevice(d)
	if err != nil {
		return err
	}
	_, err = s.registerDevice(ctx, dev, nil)
	return err
}

// RegisterSessionDevice records a token a device sent over its own session:
// uid is what the calling boat holds for sid, and the session record must
// say that sid of uid is on boatID; its platform is the device's. The device
// chooses only provider and token. A session that is not recorded so is
// refused with PermissionDenied and nothing is written (register.lua checks
// the record again in the same step as the write). It returns the provider
// used and whether the token is new.
func (s *Station) RegisterSessionDevice(ctx context.Context, boatID, uid, sid, provider, token string) (string, bool, error) {
	switch {
	case boatID == "":
		return "", false, grpcerr.Invalid("boat_id", "must be set")
	case sid == "":
		return "", false, grpcerr.Invalid("sid", "must be set")
	}
	if err := validUID(uid); err != nil {
		return "", false, err
	}
	all, err := s.sessions.List(ctx, uid)
	if err != nil {
		return "", false, err
	}
	i := slices.IndexFunc(all, func(ss session.Session) bool { return ss.Sid == sid && ss.BoatID == boatID })
	if i < 0 {
		return "", false, errNotYourSession(uid, sid, boatID)
	}
	platform := all[i].Platform
	dev, err := s.validDevice(&pushpb.Device{Uid: uid, Platform: platform, Provider: provider, Token: token})
	if err != nil {
		return "", false, err
	}
	owner := &device.Owner{Sid: sid, Value: session.Value(platform, boatID)}
	added, err := s.registerDevice(ctx, dev, owner)
	if errors.Is(err, device.ErrNoSession) {
		return "", false, errNotYourSession(uid, sid, boatID) // it ended meanwhile
	}
	return dev.Provider, added, err
}

func errNotYourSession(uid, sid, boatID string) error {
	return grpcerr.New(codes.PermissionDenied, errorpb.Code_SESSION_NOT_FOUND,
		"uid %q has no session %q on boat %q", uid, sid, boatID)
}

// registerDevice writes a validated device under the cap.
func (s *Station) registerDevice(ctx context.Context, dev device.Device, owner *device.Owner) (bool, error) {
	r, err := s.devices.Register(ctx, dev, s.cfg.MaxDevicesPerUID, owner)
	if err != nil {
		return false, err
	}
	if r.MovedFrom != "" {
		if ce := s.log.Check(zap.DebugLevel, "device token moved from another user"); ce != nil {
			ce.Write(zap.String("uid", dev.UID), zap.String("from_uid", r.MovedFrom), zap.String("platform", dev.Platform))
		}
	}
	if len(r.Evicted) > 0 {
		s.metrics.DevicesEvicted.Add(float64(len(r.Evicted)))
		if ce := s.log.Check(zap.DebugLevel, "device tokens evicted by the cap"); ce != nil {
			ce.Write(zap.String("uid", dev.UID), zap.Int("evicted", len(r.Evicted)), zap.Int("max_devices_per_uid", s.cfg.MaxDevicesPerUID))
		}
	}
	return r.Added, nil
}

// UnregisterDevice removes a device token and reports whether it was there.
func (s *Station) UnregisterDevice(ctx context.Context, d *pushpb.Device) (bool, error) {
	dev, err := s.validDevice(d)
	if err != nil {
		return false, err
	}
	return s.devices.Remove(ctx, dev.UID, dev.Platform, dev.Provider, dev.Token)
}

// ListDevices lists a user's devices.
func (s *Station) ListDevices(ctx context.Context, uid string) ([]*pushpb.Device, error) {
	if err := validUID(uid); err != nil {
		return nil, err
	}
	all, err := s.devices.List(ctx, uid, "")
	if err != nil {
		return nil, err
	}
	out := make([]*pushpb.Device, len(all))
	for i, d := range all {
		out[i] = &pushpb.Device{Uid: d.UID, Platform: d.Platform, Provider: d.Provider, Token: d.Token,
			AppId: d.AppID, RegisteredAt: d.RegisteredAt}
	}
	return out, nil
}

// validDevice checks a device and fills its provider from the platform's
// notifier when empty.
func (s *Station) validDevice(d *pushpb.Device) (device.Device, error) {
	if d == nil {
		return device.Device{}, grpcerr.Invalid("device", "must be set")
	}
	if err := validUID(d.GetUid()); err != nil {
		return device.Device{}, err
	}
	p, ok := s.cfg.Platforms.Get(d.GetPlatform())
	if !ok {
		return device.Device{}, grpcerr.UnknownPlatform("device.platform", d.GetPlatform())
	}
	if p.Notifier == "" {
		return device.Device{}, grpcerr.Invalid("device.platform", "platform %q has no notifier configured (--platforms …:notify=<provider>)", p.Name)
	}
	provider := d.GetProvider()
	if provider == "" {
		provider = p.Notifier
	}
	switch {
	case !slices.Contains(knownProviders, provider):
		return device.Device{}, grpcerr.Invalid("device.provider", "unknown provider %q (known: %s)", provider, strings.Join(knownProviders, ", "))
	case provider != p.Notifier:
		return device.Device{}, grpcerr.Invalid("device.provider", "platform %q is served by %q, not %q", p.Name, p.Notifier, provider)
	case d.GetToken() == "":
		return device.Device{}, grpcerr.Invalid("device.token", "must not be empty")
	case len(d.GetToken()) > maxTokenBytes:
		return device.Device{}, grpcerr.Invalid("device.token", "%d bytes, at most %d", len(d.GetToken()), maxTokenBytes)
	case strings.IndexFunc(d.GetToken(), func(r rune) bool { return r == '/' || !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0:
		return device.Device{}, grpcerr.Invalid("device.token", "must not contain '/', spaces or control characters")
	case len(d.GetAppId()) > 256:
		return device.Device{}, grpcerr.Invalid("device.app_id", "%d bytes, at most 256", len(d.GetAppId()))
	}
	return device.Device{UID: d.GetUid(), Platform: p.Name, Provider: provider, Token: d.GetToken(), AppID: d.GetAppId()}, nil
}

// validNotification maps content errors to InvalidArgument naming the field.
func validNotification(n *pushpb.Notification) error {
	err := notification.Validate(n)
	if err == nil {
		// Before fe: errors.As makes it escape, one allocation per push.
		return nil
	}
	var fe *notification.FieldError
	if errors.As(err, &fe) {
		return grpcerr.Invalid(fe.Field, "%s", fe.Msg)
	}
	return err
}
