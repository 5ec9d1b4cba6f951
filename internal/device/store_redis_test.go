package device_test

import (
	"context"
	"testing"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/testutil"
)

func TestRegisterIsIdempotentAndListFilters(t *testing.T) {
	t.Parallel()
	rdb := testutil.StartRedis(t).Client(t)
	s := device.New(rdb)
	ctx := context.Background()
	phone := device.Device{UID: "u1", Platform: "ios", Provider: "apns", Token: "t1", AppID: "com.a", RegisteredAt: 1}
	if added, err := s.Register(ctx, phone); err != nil || !added {
		t.Fatalf("first register: %v, %v; want added", added, err)
	}
	phone.AppID, phone.RegisteredAt = "com.b", 2
	if added, err := s.Register(ctx, phone); err != nil || added {
		t.Fatalf("second register: %v, %v; want not added", added, err)
	}
	if _, err := s.Register(ctx, device.Device{UID: "u1", Platform: "android", Provider: "fcm", Token: "t2"}); err != nil {
		t.Fatal(err)
	}
	if v := rdb.HGet(ctx, "msg/u:u1/dv", "ios/apns/t1").Val(); v != `{"app_id":"com.b","registered_at":2}` {
		t.Fatalf("stored value %q", v)
	}
	all, err := s.List(ctx, "u1", "")
	if err != nil || len(all) != 2 || all[0].Token != "t2" || all[1] != phone {
		t.Fatalf("List = %+v, %v; want t2 then the updated phone", all, err)
	}
	ios, err := s.List(ctx, "u1", "ios")
	if err != nil || len(ios) != 1 || ios[0].Token != "t1" {
		t.Fatalf("List(ios) = %+v, %v", ios, err)
	}
	if removed, err := s.Remove(ctx, "u1", "ios", "apns", "t1"); err != nil || !removed {
		t.Fatalf("remove: %v, %v", removed, err)
	}
	if removed, _ := s.Remove(ctx, "u1", "ios", "apns", "t1"); removed {
		t.Fatal("second remove reported a removal")
	}
	if ios, _ := s.List(ctx, "u1", "ios"); len(ios) != 0 {
		t.Fatalf("List(ios) after remove = %+v", ios)
	}
}
