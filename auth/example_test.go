package auth_test

// Runnable documentation: authenticating a node against a Store.

import (
	"fmt"

	"busbar/auth"
)

func ExampleStore_Authenticate() {
	secret, hash, err := auth.NewSecret()
	if err != nil {
		panic(err)
	}
	store, err := auth.NewStore([]auth.Principal{{
		Name:       "billing",
		SecretHash: hash,
		Nodes:      []auth.Pattern{"billing-*"},
		Permissions: auth.Permissions{
			Handle:    []auth.Pattern{"billing.>"},
			Subscribe: []auth.Pattern{"orders.*"},
		},
	}})
	if err != nil {
		panic(err)
	}

	p, err := store.Authenticate(auth.Credential{Principal: "billing", Secret: secret}, "billing-1", nil)
	fmt.Println(p.Name, err)
	fmt.Println(p.Permissions.Allows(auth.ActionHandle, "billing.charge"))
	fmt.Println(p.Permissions.Allows(auth.ActionPublish, "billing.charge"))

	_, err = store.Authenticate(auth.Credential{Principal: "billing", Secret: "guess"}, "billing-1", nil)
	fmt.Println(err, "|", auth.Reason(err))

	_, err = store.Authenticate(auth.Credential{Principal: "billing", Secret: secret}, "web-1", nil)
	fmt.Println(err)
	// Output:
	// billing <nil>
	// true
	// false
	// auth: bad credentials | principal "billing": wrong secret
	// auth: node name not allowed: principal "billing" may not claim node "web-1"
}
