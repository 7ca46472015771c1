// A <select data-autosubmit> submits its form when it changes (no inline handler: the
// Content-Security-Policy allows scripts from this origin's files only).
document.addEventListener("change", (event) => {
  const field = event.target;
  if (field instanceof HTMLSelectElement && field.hasAttribute("data-autosubmit") && field.form) {
    field.form.requestSubmit();
  }
});
