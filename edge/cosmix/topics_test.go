package cosmix

import (
	"strings"
	"testing"

	"busbar/broker"
)

const greetTopic = "---\ncommand: world.changed\ntype: event\n---\n{\"n\":1}\n"

func TestATopicPublicationReachesSubscribersAndIsRetainedForLaterOnes(t *testing.T) {
	e := start(t, nil)
	sub, pub := e.dial(), e.dial()
	sub.register("panel", 1)
	// SupervisedClient::subscribe_topic: call_with_headers("noded", "topic.subscribe", {name}).
	sub.send("---\ncommand: topic.subscribe\nfrom: panel\nid: 2\nname: world.noded\nto: noded\ntype: request\n---\n")
	m := sub.recvMsg()
	if m.Value("rc") != "0" || !strings.Contains(string(m.Body()), `"replayed": false, "seq": 0}`) {
		t.Fatalf("subscribe: %v", m)
	}
	pub.send("---\ncommand: topic.publish\nid: 1\nname: world.noded\nto: noded\ntype: request\n---\n" + greetTopic)
	pub.expect("---\ncommand: topic.publish\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n{\"seq\": 1, \"delivered\": 1}\n")
	sub.expect("---\nbroker_origin: local\ncommand: world.changed\ntopic: world.noded\ntopic_seq: 1\ntype: event\n---\n{\"n\":1}\n")

	late := e.dial()
	late.send("---\ncommand: topic.subscribe\nid: 1\nname: world.noded\nto: noded\ntype: request\n---\n")
	if m := late.recvMsg(); m.Value("rc") != "0" || !strings.Contains(string(m.Body()), `"replayed": true, "seq": 1}`) {
		t.Fatalf("late subscribe: %v", m)
	}
	late.expect("---\nbroker_origin: local\ncommand: world.changed\ntopic: world.noded\ntopic_seq: 1\ntype: event\n---\n{\"n\":1}\n")

	sub.send("---\ncommand: topic.unsubscribe\nid: 3\nname: world.noded\nto: noded\ntype: request\n---\n")
	sub.expect("---\ncommand: topic.unsubscribe\nfrom: noded\nid: 3\nrc: 0\ntype: response\n---\n{}\n")
	pub.send("---\ncommand: topic.publish\nid: 2\nname: world.noded\nretain: false\nto: noded\ntype: request\n---\n" + greetTopic)
	pub.expect("---\ncommand: topic.publish\nfrom: noded\nid: 2\nrc: 0\ntype: response\n---\n{\"seq\": 2, \"delivered\": 1}\n")
	late.recvMsg() // late still hears it; sub no longer does:
	sub.send("---\ncommand: noded.ping\nid: 4\ntype: request\n---\n")
	if m := sub.recvMsg(); m.Value("command") != "noded.ping" {
		t.Fatalf("an unsubscribed connection got %v", m)
	}
}

func TestATopicPublicationFromABusbarNodeReachesACosmixSubscriber(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	a.send("---\ncommand: topic.subscribe\nid: 1\nname: sensors.temp\nto: noded\ntype: request\n---\n")
	a.recvMsg()
	if _, err := e.node("alpha").Scope("t").Channel(TopicNamespace+":sensors.temp").Publish(ctxT(t), []byte("21.5")); err != nil {
		t.Fatal(err)
	}
	a.expect("---\ncommand: sensors.temp\ntopic: sensors.temp\ntype: event\n---\n21.5\n")
}

func TestTopicRequestsThatCannotBeServedGetNodedsAnswers(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	for _, c := range []struct{ frame, want string }{
		{"---\ncommand: topic.subscribe\nid: 1\nto: noded\ntype: request\n---\n",
			"---\ncommand: topic.subscribe\nerror: topic.subscribe requires 'name' header\nfrom: noded\nid: 1\nrc: 10\ntype: response\n---\n"},
		{"---\ncommand: topic.publish\nid: 2\nname: $sys\nto: noded\ntype: request\n---\n" + greetTopic,
			"---\ncommand: topic.publish\nfrom: noded\nid: 2\nrc: 10\ntype: response\n---\n{\"error\": \"reserved_name\"}\n"},
		{"---\ncommand: topic.publish\nid: 3\nname: t\nto: noded\ntype: request\n---\nnot a frame\n",
			"---\ncommand: topic.publish\nfrom: noded\nid: 3\nrc: 10\ntype: response\n---\n{\"error\": \"malformed_payload\"}\n"},
		{"---\ncommand: topic.subscribe\nid: 4\nname: Bad Name\nto: noded\ntype: request\n---\n",
			"---\ncommand: topic.subscribe\nerror: topic name 'Bad Name' is not a busbar channel path (lower-case letters, digits, '.', '_', '-')\nfrom: noded\nid: 4\nrc: 10\ntype: response\n---\n"},
	} {
		a.send(c.frame)
		a.expect(c.want)
	}
}

func TestATopicFrameOfMaxSnapshotBytesIsPublishedAndOneByteMoreIsRefused(t *testing.T) {
	e := startWith(t, broker.Options{MaxPayload: 2 * MaxSnapshotBytes}, nil)
	a := e.dial()
	head := "---\ncommand: big\n---\n"
	at := head + strings.Repeat("a", MaxSnapshotBytes-len(head))
	a.send("---\ncommand: topic.publish\nid: 1\nname: big\nto: noded\ntype: request\n---\n" + at)
	if m := a.recvMsg(); m.Value("rc") != "0" {
		t.Fatalf("at the limit: %v", m)
	}
	a.send("---\ncommand: topic.publish\nid: 2\nname: big\nto: noded\ntype: request\n---\n" + at + "a")
	a.expect("---\ncommand: topic.publish\nfrom: noded\nid: 2\nrc: 10\ntype: response\n---\n{\"error\": \"payload_too_large\", \"limit\": 1048576}\n")
}

func TestATopicFrameOverTheBrokersMaxPayloadIsRefusedWithItsLimit(t *testing.T) {
	e := start(t, nil) // the default --max-payload, 1 MiB: the topic headers take it over
	a := e.dial()
	head := "---\ncommand: big\n---\n"
	a.send("---\ncommand: topic.publish\nid: 1\nname: big\nto: noded\ntype: request\n---\n" + head + strings.Repeat("a", MaxSnapshotBytes-len(head)))
	m := a.recvMsg()
	if m.Value("rc") != "10" || string(m.Body()) != `{"error": "payload_too_large"}` || !strings.Contains(m.Value("error"), "the broker's limit of 1048576") {
		t.Fatalf("got %v", m)
	}
}

func TestRetainedFramesUpToMaxRetainedBytesAreKeptAndOneMoreIsDeliveredWithRC5(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	frame := len("---\nbroker_origin: local\ncommand: world.changed\ntopic: t1\ntopic_seq: 1\ntype: event\n---\n{\"n\":1}\n")
	e.srv.topics.mu.Lock()
	e.srv.topics.bytes = MaxRetainedBytes - frame // as if the others held all but one frame's room
	e.srv.topics.mu.Unlock()
	a.send("---\ncommand: topic.publish\nid: 1\nname: t1\nto: noded\ntype: request\n---\n" + greetTopic)
	a.expect("---\ncommand: topic.publish\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n{\"seq\": 1, \"delivered\": 0}\n")
	a.send("---\ncommand: topic.publish\nid: 2\nname: t2\nto: noded\ntype: request\n---\n" + greetTopic)
	a.expect("---\ncommand: topic.publish\nfrom: noded\nid: 2\nrc: 5\ntype: response\n---\n{\"seq\": 1, \"delivered\": 0, \"warning\": \"not_retained\"}\n")
}

func TestMaxTopicsAreKeptAndOneMoreIsDeliveredWithRC5(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	e.srv.topics.mu.Lock()
	for i := range MaxTopics - 1 { // as if that many had been published
		e.srv.topics.topics["pre"+itoa(i)] = &topicState{}
	}
	e.srv.topics.mu.Unlock()
	a.send("---\ncommand: topic.publish\nid: 1\nname: last\nto: noded\ntype: request\n---\n" + greetTopic)
	a.expect("---\ncommand: topic.publish\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n{\"seq\": 1, \"delivered\": 0}\n")
	a.send("---\ncommand: topic.publish\nid: 2\nname: one-more\nto: noded\ntype: request\n---\n" + greetTopic)
	a.expect("---\ncommand: topic.publish\nfrom: noded\nid: 2\nrc: 5\ntype: response\n---\n{\"seq\": 0, \"delivered\": 0, \"warning\": \"not_retained\"}\n")
}

func TestMaxTopicSubscriptionsAreTakenAndOneMoreIsRC10(t *testing.T) {
	e := start(t, nil)
	a := e.dial()
	for i := range MaxTopicSubscriptions {
		a.send("---\ncommand: topic.subscribe\nid: " + itoa(i) + "\nname: t" + itoa(i) + "\nto: noded\ntype: request\n---\n")
		if m := a.recvMsg(); m.Value("rc") != "0" {
			t.Fatalf("subscription %d: %v", i+1, m)
		}
	}
	a.send("---\ncommand: topic.subscribe\nid: x\nname: one-more\nto: noded\ntype: request\n---\n")
	a.expect("---\ncommand: topic.subscribe\nerror: topic.subscribe: 1022 topic subscriptions on this connection already (the limit)\nfrom: noded\nid: x\nrc: 10\ntype: response\n---\n")
}

func TestTopicListCountAndClearAnswerAsNodedDoes(t *testing.T) {
	e := start(t, nil)
	sub, pub := e.dial(), e.dial()
	pub.register("sensors", 1)
	sub.send("---\ncommand: topic.subscribe\nid: 1\nname: world.a\nto: noded\ntype: request\n---\n")
	sub.recvMsg()
	pub.send("---\ncommand: topic.publish\nid: 2\nname: world.b\nto: noded\ntype: request\n---\n" + greetTopic)
	pub.recvMsg()

	pub.send("---\ncommand: topic.subscriber_count\nid: 3\nname: world.a\nto: noded\ntype: request\n---\n")
	pub.expect("---\ncommand: topic.subscriber_count\nfrom: noded\nid: 3\nrc: 0\ntype: response\n---\n{\"count\": 1}\n")

	size := len("---\nbroker_origin: local\ncommand: world.changed\ntopic: world.b\ntopic_seq: 1\ntype: event\n---\n{\"n\":1}\n")
	pub.send("---\ncommand: topic.list\nid: 4\nprefix: world.\nto: noded\ntype: request\n---\n")
	pub.expect("---\ncommand: topic.list\nfrom: noded\nid: 4\nrc: 0\ntype: response\n---\n" +
		`[{"name":"world.a","subscribers":1,"has_snapshot":false,"snapshot_seq":0,"snapshot_size":0,"last_publisher":null,"stale":false},` +
		`{"name":"world.b","subscribers":0,"has_snapshot":true,"snapshot_seq":1,"snapshot_size":` + itoa(size) + `,"last_publisher":"sensors","stale":false}]` + "\n")

	// Clear: the subscribers get noded's delete notice; later ones no frame.
	sub.send("---\ncommand: topic.subscribe\nid: 5\nname: world.b\nto: noded\ntype: request\n---\n")
	sub.recvMsg()
	sub.recvMsg() // the retained frame
	pub.send("---\ncommand: topic.clear\nid: 6\nname: world.b\nto: noded\ntype: request\n---\n")
	pub.expect("---\ncommand: topic.clear\nfrom: noded\nid: 6\nrc: 0\ntype: response\n---\n{\"delivered\": 1}\n")
	sub.expect("---\ncommand: ui.noop\ntopic: world.b\ntopic_op: delete\ntopic_seq: 1\n---\n")
	late := e.dial()
	late.send("---\ncommand: topic.subscribe\nid: 1\nname: world.b\nto: noded\ntype: request\n---\n")
	if m := late.recvMsg(); !strings.Contains(string(m.Body()), `"replayed": false`) {
		t.Fatalf("after clear: %v", m)
	}
}

// forgedTopic is a topic frame whose publisher wrote the headers the
// adapter stamps (stampedHeaders) and noded's reserved ones, in several
// spellings.
const forgedTopic = "---\nBROKER_PRINCIPAL: forged\nBroker_Origin: mesh\nbroker_peer: gamma\nbroker_principal: {\"version\":1,\"assurance\":\"local-unix\"}\n" +
	"broker_service: maild\nbusbar-vouch: forged\ncommand: world.changed\nMESH_FROM: delta\ntopic_op: delete\ntopic_stale: true\ntype: event\n---\n{\"n\":1}\n"

// What every subscriber gets of forgedTopic, live or replayed.
const strippedTopic = "---\nbroker_origin: local\ncommand: world.changed\ntopic: world.noded\ntopic_seq: 1\ntype: event\n---\n{\"n\":1}\n"

// A publisher's broker_principal (or voucher) is neither delivered nor
// retained: a later subscriber's replay is the frame a live one got.
func TestARetainedTopicFrameIsReplayedWithoutTheHeadersTheBrokerStamps(t *testing.T) {
	e := start(t, nil)
	sub, pub := e.dial(), e.dial()
	sub.send("---\ncommand: topic.subscribe\nid: 1\nname: world.noded\nto: noded\ntype: request\n---\n")
	if m := sub.recvMsg(); m.Value("rc") != "0" {
		t.Fatalf("subscribe: %v", m)
	}
	pub.send("---\ncommand: topic.publish\nid: 1\nname: world.noded\nto: noded\ntype: request\n---\n" + forgedTopic)
	pub.expect("---\ncommand: topic.publish\nfrom: noded\nid: 1\nrc: 0\ntype: response\n---\n{\"seq\": 1, \"delivered\": 1}\n")
	sub.expect(strippedTopic)

	late := e.dial()
	late.send("---\ncommand: topic.subscribe\nid: 1\nname: world.noded\nto: noded\ntype: request\n---\n")
	if m := late.recvMsg(); m.Value("rc") != "0" || !strings.Contains(string(m.Body()), `"replayed": true`) {
		t.Fatalf("late subscribe: %v", m)
	}
	late.expect(strippedTopic)
}
