package cli

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"busbar/durable"
	"busbar/seal"
)

func init() {
	addVerb(runID, []helpPage{
		{path: "id", summary: "this device's identity for durable delivery: init, show",
			text:    "The device's keys live in --device, else $BUSBAR_DEVICE, else <data>/device.",
			exit:    "0  done\n1  no device, or it could not be read or made\n2  usage",
			example: "$ busbar id init"},
		{path: "id init", summary: "make the device and print its id",
			text: "A directory that already holds a device is kept (stderr says so).", example: "$ busbar id init --device ~/phone"},
		{path: "id show", summary: "print the device's id (--json: id, dir, public, groups)",
			text: "Prints the id, or with --json one object.", example: "$ busbar id show --json"},
	})
}

func runID(args []string, stdio IO) int {
	if code, ok := pickSubcommand(stdio, "id", args); !ok {
		return code
	}
	v := newVerb("id "+args[0], func(n int) bool { return n == 0 }, stdio)
	dev := registerDevice(v)
	asJSON := v.fs.Bool("json", false, "print the device as a JSON object")
	if !v.parse(args[1:]) {
		return exitUsage
	}
	dir := deviceDir(*dev, v.conn.data)
	var d *durable.Device
	var err error
	if args[0] == "init" {
		var opts durable.Options
		if opts, err = deviceOptions(); err == nil {
			d, err = durable.Init(dir, opts)
		}
		if err != nil && errors.Is(err, seal.ErrKeyExists) {
			fmt.Fprintf(stdio.Stderr, "busbar id init: %s already holds a device\n", dir)
			d, err = openDevice(dir)
		}
	} else {
		d, err = openDevice(dir)
	}
	if err != nil {
		return v.fail(stdio, err, exitFail)
	}
	defer d.Close()
	if !*asJSON {
		fmt.Fprintln(stdio.Stdout, d.ID())
		return exitOK
	}
	groups, _ := d.Groups()
	_ = json.NewEncoder(stdio.Stdout).Encode(struct {
		ID     string   `json:"id"`
		Dir    string   `json:"dir"`
		Public string   `json:"public"`
		Groups []string `json:"groups"`
	}{d.ID().String(), d.Dir(), base64.StdEncoding.EncodeToString(d.Identity().Public().Bytes()), groups})
	return exitOK
}
