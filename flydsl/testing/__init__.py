"""Testing aids: run flydsl's GPU launch code on machines without a GPU."""
