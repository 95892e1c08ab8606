"""The chart's admission policies, checked: `verdict` (whether they still confine the
operator, from the policies and bindings as read and the dry runs' answers) and `probes` (the
dry runs the controller sends as itself, and how an answer is read). Pure; the controller's
shell is `controller/admission_guard.py`, doctor's rule `core/rules/admission.py`."""
