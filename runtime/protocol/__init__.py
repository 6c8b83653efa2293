"""The KServe V2 codec and tensor data, shared by every transport."""
