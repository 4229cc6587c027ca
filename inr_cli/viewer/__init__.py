"""`inr view`: a local web page to look at a trained network (deep zoom drawn on demand), follow a
run as it trains, and browse a set of networks."""
