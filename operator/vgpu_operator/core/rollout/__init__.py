"""Safe transitions: which nodes may change now (`decide`), one arriving node's steps
(`arrive`), one leaving node's (`leave`), what the steps wait for around the node's device
plugin (`plugin`), and which pods hold GPUs (`gpu_pods`). Pure."""
