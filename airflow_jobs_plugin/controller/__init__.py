"""The admission controller: the one identity that admits, rules on and ends the product's jobs, and
its leader election."""
