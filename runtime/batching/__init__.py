"""Dynamic batching of one model's requests: the queue, the batcher that forms batches
(paced by measured run times), and the dispatcher threads that run them. Below `bundles`
(its loader builds a `Batcher` per batched model) and above `backends` (what a batch runs)."""
