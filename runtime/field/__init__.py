"""In the field: the durable store-and-forward queue and what drains it."""
