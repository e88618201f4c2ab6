package bedrock

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"

	"busbar/state"
)

// Payloads are read as JavaScript reads them: keys match exactly (Go's
// json.Unmarshal into a struct would match "Method" or "METHOD" for
// method, and take the last of two look-alikes), and a field of the wrong
// type makes the payload malformed. An absent optional field is its zero.

var errPayload = errors.New("bedrock: malformed payload")

// object is a JSON object's fields by exact key.
type object map[string]json.RawMessage

func decodeObject(raw json.RawMessage) (object, error) {
	var o object
	if err := json.Unmarshal(raw, &o); err != nil || o == nil {
		return nil, errPayload
	}
	return o, nil
}

// str reads a string field; required fails when it is absent.
func (o object) str(key string, required bool) (string, error) {
	raw, ok := o[key]
	if !ok {
		if required {
			return "", errPayload
		}
		return "", nil
	}
	s, ok := jsString(raw)
	if !ok {
		return "", errPayload
	}
	return stringOf(s), nil
}

// boolean reads an optional boolean field (absent: false).
func (o object) boolean(key string) (bool, error) {
	raw, ok := o[key]
	if !ok {
		return false, nil
	}
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, errPayload
}

// integer reads an integer field.
func (o object) integer(key string, required bool) (int64, error) {
	raw, ok := o[key]
	if !ok {
		if required {
			return 0, errPayload
		}
		return 0, nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 || len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		return 0, errPayload
	}
	return int64(f), nil
}

// value reads an optional JSON value (absent: nil).
func (o object) value(key string) json.RawMessage { return o[key] }

func decodeRequest(raw json.RawMessage) (Request, error) {
	o, err := decodeObject(raw)
	if err != nil {
		return Request{}, err
	}
	var r Request
	if r.Method, err = o.str("method", true); err != nil || r.Method == "" {
		return Request{}, errPayload
	}
	r.Params = o.value("params")
	return r, nil
}

func decodeResponse(raw json.RawMessage) (Response, error) {
	o, err := decodeObject(raw)
	if err != nil {
		return Response{}, err
	}
	var r Response
	if r.RID, err = o.str("rid", true); err != nil {
		return Response{}, err
	}
	if _, present := o["ok"]; !present {
		return Response{}, errPayload
	}
	if r.OK, err = o.boolean("ok"); err != nil {
		return Response{}, err
	}
	if r.Err, err = o.str("err", false); err != nil {
		return Response{}, err
	}
	r.Data = o.value("data")
	return r, nil
}

func decodeAnnounce(raw json.RawMessage) (AnnounceData, error) {
	o, err := decodeObject(raw)
	if err != nil {
		return AnnounceData{}, err
	}
	var a AnnounceData
	if a.Version, err = o.str("version", true); err != nil {
		return AnnounceData{}, err
	}
	sv, err := o.integer("schemaVersion", true)
	if err != nil {
		return AnnounceData{}, err
	}
	a.SchemaVersion = int(sv)
	a.Meta = o.value("meta")
	return a, nil
}

func decodeDelta(raw json.RawMessage) (deltaData, error) {
	o, err := decodeObject(raw)
	if err != nil {
		return deltaData{}, err
	}
	var d deltaData
	if d.NS, err = o.str("ns", true); err != nil {
		return deltaData{}, err
	}
	if d.Key, err = o.str("key", true); err != nil {
		return deltaData{}, err
	}
	ver, err := o.integer("ver", true)
	if err != nil || ver < 1 {
		return deltaData{}, errPayload
	}
	d.Ver = uint64(ver)
	if d.Del, err = o.boolean("del"); err != nil {
		return deltaData{}, err
	}
	d.Value = o.value("value")
	return d, nil
}

func decodeStateRequest(raw json.RawMessage) (requestData, error) {
	if len(raw) == 0 {
		return requestData{}, nil
	}
	o, err := decodeObject(raw)
	if err != nil {
		return requestData{}, err
	}
	ns, err := o.str("ns", false)
	return requestData{NS: ns}, err
}

func decodeSnapshot(raw json.RawMessage) (snapshotData, error) {
	o, err := decodeObject(raw)
	if err != nil {
		return snapshotData{}, err
	}
	var s snapshotData
	if s.NS, err = o.str("ns", true); err != nil {
		return snapshotData{}, err
	}
	var list []json.RawMessage
	if err := json.Unmarshal(o["entries"], &list); err != nil {
		return snapshotData{}, errPayload
	}
	for _, raw := range list {
		eo, err := decodeObject(raw)
		if err != nil {
			return snapshotData{}, err
		}
		var e state.Entry
		if e.Key, err = eo.str("k", true); err != nil {
			return snapshotData{}, err
		}
		ver, err := eo.integer("ver", true)
		if err != nil || ver < 0 {
			return snapshotData{}, errPayload
		}
		e.Version = uint64(ver)
		if e.Source, err = eo.str("src", true); err != nil {
			return snapshotData{}, err
		}
		if e.Deleted, err = eo.boolean("del"); err != nil {
			return snapshotData{}, err
		}
		if !e.Deleted {
			e.Value = eo.value("v")
		}
		s.Entries = append(s.Entries, e)
	}
	return s, nil
}
