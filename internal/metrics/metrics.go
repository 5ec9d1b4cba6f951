// Package metrics defines every Prometheus metric gomsg exports. One Metrics
// is made per process (or per in-process cluster) and handed to the services,
// so tests never share counters.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Outcomes of a ToUid task on one platform (label "outcome").
const (
	Acked         = "acked"          // newest session got it and ACKed (NEED_ACK)
	Delivered     = "delivered"      // newest session got it (no ACK asked)
	StoredOffline = "stored_offline" // kept in the offline store
	Notified      = "notified"       // a notification task was published
	Retried       = "retried"        // republished to the retry topic
	DeadLettered  = "dead_lettered"  // sent to the dead-letter topic
	Offline       = "offline"        // nobody online and nothing to store
)

// Metrics holds gomsg's collectors and the registry they are on.
type Metrics struct {
	Registry *prometheus.Registry

	// boat
	SessionsOnline *prometheus.GaugeVec   // boat
	Connects       *prometheus.CounterVec // result: ok, unauthenticated, invalid, unavailable, limited, aborted, refused, error
	// WSCloses counts WebSocket sessions closed by the boat, by close code.
	WSCloses   *prometheus.CounterVec
	Kickouts   *prometheus.CounterVec // reason
	AckLatency prometheus.Histogram
	// BoatDeliverFrame is the deliveries per frame of carrier's Deliver
	// streams: how much batching the delivery path gets.
	BoatDeliverFrame prometheus.Histogram
	// Rooms: memberships live in the boat that holds the session.
	BoatRooms        *prometheus.GaugeVec   // boat: rooms with at least one member
	BoatRoomMembers  *prometheus.GaugeVec   // boat: memberships (a session in 3 rooms counts 3)
	RoomJoins        *prometheus.CounterVec // result: ok, invalid, denied, limited
	BroadcastFanout  prometheus.Histogram   // sessions one broadcast was queued for on one boat
	RoomBatch        prometheus.Histogram   // messages per room frame sent to a session
	BroadcastSent    prometheus.Counter     // broadcast messages queued to sessions (messages × sessions)
	BroadcastDropped *prometheus.CounterVec // reason: slow_consumer, ended, overflow

	// station
	PushRequests     *prometheus.CounterVec // code (gRPC code name)
	PushesAccepted   prometheus.Counter     // ToUid tasks acknowledged by Kafka
	MessagesAccepted prometheus.Counter     // message bodies accepted
	DisconnectCalls  prometheus.Counter     // Disconnect RPCs (each a batch)
	Disconnected     prometheus.Counter     // sessions removed by them
	DevicesEvicted   prometheus.Counter     // device tokens evicted by the per-uid cap
	Broadcasts       *prometheus.CounterVec // kind: room, all; broadcast tasks acknowledged by Kafka
	// Presence events (--presence-topic): written to Kafka by kind, and
	// dropped by reason.
	PresenceEvents  *prometheus.CounterVec // kind: connected, disconnected, kicked
	PresenceDropped *prometheus.CounterVec // reason: overflow, shutdown, invalid
	// Pulls of the offline store: PullOffline answers by result, and the
	// messages their pages carried.
	Pulls          *prometheus.CounterVec // result: ok, invalid, denied, unavailable, canceled, error
	PulledMessages prometheus.Counter

	// carrier
	Deliveries       *prometheus.CounterVec // outcome
	PushToDelivery   prometheus.Histogram
	TasksProcessed   *prometheus.CounterVec // kind, result
	ConsumerLag      *prometheus.GaugeVec   // topic
	ConsumerBuffered *prometheus.GaugeVec   // topic
	ResumeWaits      *prometheus.CounterVec // topic
	DirtySessions    prometheus.Counter
	OfflineReplayed  prometheus.Counter
	ReplaysQueued    prometheus.Counter
	BackendErrors    *prometheus.CounterVec // backend: redis, kafka, nats, etcd; op
	// Queue is the backend label of the queue's errors (QueueError): "kafka"
	// (when empty) or "nats", the queue the services run on.
	Queue              string
	LimitRejections    *prometheus.CounterVec // limit: the flag's name without dashes
	KeyQuotaRejections *prometheus.CounterVec // limit, key: per-API-key quotas' refusals by key name
	NotificationsSent  *prometheus.CounterVec // provider, result
	NotifyLatency      *prometheus.HistogramVec
	DeviceTokensPruned *prometheus.CounterVec // provider
	BroadcastBoats     *prometheus.CounterVec // result: ok, error; broadcast tasks handed to one boat
	// Consumed records whose work produced a record Kafka will never take
	// (larger than its topic accepts), by what became of them.
	UnwritableRecords *prometheus.CounterVec // service: carrier, horn; outcome: dead_lettered, dropped
	// The delivery store (GetDelivery), which carrier fills from the
	// receipts topic: receipts written, skipped (undecodable or not
	// storable), and failed writes (retried).
	ReceiptsApplied     prometheus.Counter
	ReceiptsSkipped     prometheus.Counter
	ReceiptsStoreErrors prometheus.Counter

	AuthFailures *prometheus.CounterVec // api, reason: calls refused for a missing/invalid credential or scope
	// station's --api-keys-file: 1 while it cannot be used; its keys
	// dropped after --api-keys-grace.
	APIKeysFileUnusable prometheus.Gauge
	APIKeysDropped      prometheus.Counter

	// Notify if unseen (package unseen): notifications by event, and the
	// timer's entries by state.
	UnseenNotifications *prometheus.CounterVec // event: scheduled, sent, cancelled
	UnseenEntries       *prometheus.GaugeVec   // state: scheduled, due
	// The dead-letter topic as its list shows it (neither redriven nor
	// purged), computed by station; and the tasks redriven by result.
	DLQRecords   prometheus.Gauge
	DLQOldestAge prometheus.Gauge
	DLQRedrives  *prometheus.CounterVec // result: redriven, refused
}

// Events of a notify-if-unseen notification (label "event"), counted per
// notification (one per platform).
const (
	UnseenScheduled = "scheduled" // put in the timer
	UnseenSent      = "sent"      // published to the notify topic when due
	UnseenCancelled = "cancelled" // removed by an ACK before it was due
)

// New makes the collectors on a fresh registry, with the Go and process
// collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	m := &Metrics{Registry: r}
	latency := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

	m.SessionsOnline = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gomsg_boat_sessions_online",
		Help: "Client sessions a boat holds."}, []string{"boat"})
	m.Connects = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_boat_connects_total",
		Help: "Client stream connects by result."}, []string{"result"})
	m.WSCloses = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_boat_websocket_closes_total",
		Help: "WebSocket sessions a boat closed, by close code (4000+gRPC code: refused or failed; 4100+kickout reason; 1003, 1007, 1009: bad frames; 1000: normal)."}, []string{"code"})
	m.Kickouts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_boat_kickouts_total",
		Help: "Sessions kicked out by reason."}, []string{"reason"})
	m.AckLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gomsg_boat_ack_latency_seconds",
		Help: "Time from sending NEED_ACK messages to the client's last ACK.", Buckets: latency})

	m.PushRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_station_push_requests_total",
		Help: "Push API requests by gRPC code."}, []string{"code"})
	m.PushesAccepted = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_station_pushes_accepted_total",
		Help: "Per-user ToUid tasks acknowledged by Kafka."})
	m.MessagesAccepted = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_station_messages_accepted_total",
		Help: "Message bodies accepted by the Push API (each gets one seq)."})

	m.DisconnectCalls = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_station_disconnect_requests_total",
		Help: "Disconnect calls from boats; each reports a batch of ended sessions."})
	m.Disconnected = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_station_disconnected_sessions_total",
		Help: "Ended sessions reported by boats."})
	m.Deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_carrier_deliveries_total",
		Help: "Outcomes of ToUid tasks per target platform."}, []string{"outcome"})
	m.PushToDelivery = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gomsg_carrier_push_to_delivery_seconds",
		Help: "Time from the Push call accepting a message to its delivery to the newest session.", Buckets: latency})
	m.TasksProcessed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_carrier_tasks_total",
		Help: "Tasks processed by kind and result."}, []string{"kind", "result"})
	m.ConsumerLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gomsg_consumer_lag",
		Help: "Records not yet fetched by the consumer, by topic."}, []string{"topic"})
	m.ConsumerBuffered = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gomsg_consumer_buffered_bytes",
		Help: "Bytes of records fetched and not yet finished by the consumer, by topic (bounded per partition by --partition-buffer-bytes)."}, []string{"topic"})
	m.ResumeWaits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_carrier_resume_waits_total",
		Help: "Failed deliveries that waited for one of the consumer's places (--workers/16) to store their messages and go on, by topic: a storm of failures draining, such as a boat that died holding many deliveries."}, []string{"topic"})
	m.DirtySessions = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_carrier_dirty_sessions_removed_total",
		Help: "Session records removed because no boat held them."})
	m.OfflineReplayed = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_carrier_offline_replayed_total",
		Help: "Stored messages replayed to reconnecting sessions and ACKed."})
	m.ReplaysQueued = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_carrier_replays_queued_total",
		Help: "SendOfflineToSession tasks carrier queued for a live session after storing messages its delivery to it failed for."})
	m.BackendErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_backend_errors_total",
		Help: "Errors talking to Redis, the queue (Kafka or NATS) or etcd."}, []string{"backend", "op"})
	m.LimitRejections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_limit_rejections_total",
		Help: "Requests, sessions or connections refused because a configured limit was reached, by limit."}, []string{"limit"})
	m.KeyQuotaRejections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_station_key_quota_rejections_total",
		Help: "Push API calls refused by a per-API-key quota (--push-rate-per-key, --receipts-rate-per-key, --idempotency-rate-per-key), by limit and key name."}, []string{"limit", "key"})

	m.NotificationsSent = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_horn_notifications_total",
		Help: "Notifications by provider and result."}, []string{"provider", "result"})
	m.NotifyLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gomsg_horn_provider_latency_seconds",
		Help: "Provider request latency.", Buckets: latency}, []string{"provider"})
	m.DeviceTokensPruned = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_horn_tokens_removed_total",
		Help: "Device tokens removed because the provider rejected them."}, []string{"provider"})

	m.BoatDeliverFrame = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gomsg_boat_deliver_frame_deliveries",
		Help: "Deliveries per frame received on carriers' Deliver streams.", Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}})

	for _, c := range []prometheus.Collector{m.SessionsOnline, m.Connects, m.WSCloses, m.Kickouts, m.AckLatency, m.BoatDeliverFrame,
		m.PushRequests, m.PushesAccepted, m.MessagesAccepted, m.DisconnectCalls, m.Disconnected, m.Deliveries, m.PushToDelivery, m.TasksProcessed,
		m.ConsumerLag, m.ConsumerBuffered, m.ResumeWaits, m.DirtySessions, m.OfflineReplayed, m.ReplaysQueued, m.BackendErrors, m.NotificationsSent, m.NotifyLatency,
		m.DeviceTokensPruned, m.LimitRejections, m.KeyQuotaRejections} {
		f(c)
	}
	m.AuthFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_auth_failures_total",
		Help: "Calls refused before their request was read: api push_grpc, push_http, station_internal, boat_internal; reason missing, invalid, scope."}, []string{"api", "reason"})
	f(m.AuthFailures)
	m.APIKeysFileUnusable = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gomsg_station_api_keys_file_unusable",
		Help: "1 while station's --api-keys-file is missing, empty, unreadable or has a bad line: its previous keys stay in force until --api-keys-grace, then are dropped."})
	f(m.APIKeysFileUnusable)
	m.APIKeysDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_station_api_keys_dropped_total",
		Help: "Times the keys of an unusable --api-keys-file were dropped after --api-keys-grace."})
	f(m.APIKeysDropped)
	m.DevicesEvicted = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_station_devices_evicted_total",
		Help: "Device tokens removed because their uid registered more than --max-devices-per-uid (oldest first)."})
	f(m.DevicesEvicted)

	m.BoatRooms = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gomsg_boat_rooms",
		Help: "Rooms with at least one member on a boat."}, []string{"boat"})
	m.BoatRoomMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gomsg_boat_room_members",
		Help: "Room memberships a boat holds (a session in three rooms counts three)."}, []string{"boat"})
	m.RoomJoins = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_boat_room_joins_total",
		Help: "JoinRoom requests by result: ok, invalid, denied, limited."}, []string{"result"})
	m.BroadcastFanout = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gomsg_boat_broadcast_fanout_sessions",
		Help: "Sessions one broadcast was queued for on one boat.", Buckets: prometheus.ExponentialBuckets(1, 4, 10)})
	m.RoomBatch = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gomsg_boat_room_batch_messages",
		Help: "Messages per room frame sent to a session (room batching).", Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}})
	m.BroadcastSent = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_boat_broadcast_messages_total",
		Help: "Broadcast messages queued to sessions (one message to 100 members counts 100)."})
	m.BroadcastDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_boat_broadcast_dropped_total",
		Help: "Broadcast messages not sent to a session, by reason: slow_consumer (its send queue was full; it is kicked), ended (the session ended or was kicked before the frame reached it), overflow (the room's batcher stayed full until the call's deadline), repeat (a call the room had taken already: a carrier's retry or a record handed again)."}, []string{"reason"})
	m.Broadcasts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_station_broadcasts_total",
		Help: "Broadcast tasks (one per room, or one to everyone) acknowledged by Kafka, by kind: room, all."}, []string{"kind"})
	m.BroadcastBoats = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_carrier_broadcast_boats_total",
		Help: "Broadcast tasks handed to one boat, by result: ok, error (the boat's members miss it)."}, []string{"result"})
	m.PresenceEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_presence_events_total",
		Help: "Presence events acknowledged by Kafka on --presence-topic, by kind: connected, disconnected, kicked."}, []string{"kind"})
	m.PresenceDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_presence_dropped_total",
		Help: "Presence events never written, by reason: overflow (--presence-buffer full while Kafka was slow or down), shutdown (still buffered when the station stopped), invalid (refused by Kafka)."}, []string{"reason"})
	f(m.PresenceEvents)
	f(m.PresenceDropped)
	m.ReceiptsApplied = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_receipts_applied_total",
		Help: "Receipts carrier wrote to the delivery store (GetDelivery) from --receipts-topic."})
	m.ReceiptsSkipped = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_receipts_skipped_total",
		Help: "Records of --receipts-topic carrier did not store: undecodable, or a receipt the store does not keep (no seq, uid, platform or state; a name too long)."})
	m.ReceiptsStoreErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_receipts_store_errors_total",
		Help: "Writes of receipts to the delivery store that Redis failed; each is retried, the records stay uncommitted until it succeeds."})
	f(m.ReceiptsApplied)
	f(m.ReceiptsSkipped)
	f(m.ReceiptsStoreErrors)
	for _, c := range []prometheus.Collector{m.BoatRooms, m.BoatRoomMembers, m.RoomJoins, m.BroadcastFanout, m.RoomBatch,
		m.BroadcastSent, m.BroadcastDropped, m.Broadcasts, m.BroadcastBoats} {
		f(c)
	}
	m.Pulls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_station_pulls_total",
		Help: "Pull requests of devices (PullOffline) by result: ok, invalid, denied (not the caller's session), unavailable (Redis), canceled, error."}, []string{"result"})
	m.PulledMessages = prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_station_pulled_messages_total",
		Help: "Offline messages sent in the pages of Pull requests."})
	f(m.Pulls)
	f(m.PulledMessages)
	m.UnseenNotifications = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_carrier_unseen_notifications_total",
		Help: "Notify-if-unseen notifications (one per platform) by event: scheduled (put in the timer), sent (published when due), cancelled (an ACK came first)."}, []string{"event"})
	m.UnseenEntries = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gomsg_carrier_unseen_entries",
		Help: "Entries of the notify-if-unseen timer in Redis, by state: scheduled (all), due (past their due time, not yet published: the poller's backlog); every carrier reports the same count."}, []string{"state"})
	f(m.UnseenNotifications)
	f(m.UnseenEntries)
	m.UnwritableRecords = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_unwritable_records_total",
		Help: "Consumed tasks (and notify-if-unseen entries) set aside because their work produced a record Kafka refuses for good (larger than its topic's max.message.bytes), by service: carrier, horn; and outcome: dead_lettered (sent to the dead-letter topic instead), dropped (the dead-letter topic refused it too, or a notify-if-unseen entry, which has none: logged at ERROR and skipped)."}, []string{"service", "outcome"})
	f(m.UnwritableRecords)
	m.DLQRecords = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gomsg_station_dlq_records",
		Help: "Dead letters waiting for an operator: tasks on carrier's dead-letter topic neither redriven nor purged; every station reports the same count, refreshed every --dlq-refresh-interval."})
	m.DLQOldestAge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gomsg_station_dlq_oldest_age_seconds",
		Help: "How long ago the oldest waiting dead letter was dead-lettered; 0 when none waits."})
	m.DLQRedrives = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gomsg_station_dlq_redrives_total",
		Help: "Dead letters a redrive handled, by result: redriven (back on the task topic), refused (past --dlq-max-redrives)."}, []string{"result"})
	f(m.DLQRecords)
	f(m.DLQOldestAge)
	f(m.DLQRedrives)
	m.DLQRedrives.WithLabelValues("redriven")
	m.DLQRedrives.WithLabelValues("refused")
	for _, e := range []string{UnseenScheduled, UnseenSent, UnseenCancelled} {
		m.UnseenNotifications.WithLabelValues(e)
	}
	return m
}

// QueueError is the BackendErrors counter of op on the queue in use.
func (m *Metrics) QueueError(op string) prometheus.Counter {
	q := m.Queue
	if q == "" {
		q = "kafka"
	}
	return m.BackendErrors.WithLabelValues(q, op)
}
