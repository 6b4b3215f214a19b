package lineage_test

import (
	"fmt"

	"github.com/idem-data/idem/internal/lineage"
)

func ExampleParentFromAttributes() {
	// The attributes Airflow's macros fill in, and one typed by hand.
	parent, ignored := lineage.ParentFromAttributes(map[string]string{
		lineage.AttrParentID:     "airflow/shop_daily.load_orders/01890a5d-ac96-774b-bcce-b302099a8057",
		lineage.AttrRootParentID: "airflow/shop_daily/scheduled__2026-11-28",
	})
	fmt.Println(parent.Namespace, parent.Name, parent.RunID, parent.Root == nil)
	for _, i := range ignored {
		fmt.Println("ignored", i)
	}
	// Output:
	// airflow shop_daily.load_orders 01890a5d-ac96-774b-bcce-b302099a8057 true
	// ignored openlineage_root_parent_id: the run id "scheduled__2026-11-28" is not a UUID (8-4-4-4-12 hexadecimal digits, not all zero)
}

func ExampleRunID() {
	// Attempt 1 of audit row 1234, in job namespace shop, pipeline shop:
	// the same id every time it is computed.
	fmt.Println(lineage.RunIDName("shop", "shop", 1234, 1))
	fmt.Println(lineage.RunID("shop", "shop", 1234, 1))
	// Output:
	// 4:shop/4:shop/1234/1
	// 0ba4e4fc-ff51-504e-9dac-d56fcc26212e
}
