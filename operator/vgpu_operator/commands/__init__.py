"""The command line: `vgpu-operator` (`cli`) and its one-shot commands (`plan`, `doctor`,
`cleanup`), and `kubectl vgpu` (`kubectl_plugin`)."""
