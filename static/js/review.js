// Keyboard shortcuts of a review item page (documented on the page itself):
// a approve, n approve and next, e edit then approve, r reject, m ask for evidence,
// j / k next / previous open item, u the queue. Nothing fires while typing in a field.
(function () {
  "use strict";

  function typing(target) {
    if (!target) return false;
    var tag = target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || target.isContentEditable;
  }

  function click(id) {
    var button = document.getElementById(id);
    if (button) button.click();
    return Boolean(button);
  }

  function focus(id) {
    var field = document.getElementById(id);
    if (field) field.focus();
    return Boolean(field);
  }

  function go(url) {
    if (url) window.location.assign(url);
    return Boolean(url);
  }

  document.addEventListener("keydown", function (event) {
    var root = document.getElementById("review-item");
    if (!root) return;
    if (event.key === "Escape" && typing(event.target)) {
      event.target.blur();
      return;
    }
    if (typing(event.target) || event.ctrlKey || event.metaKey || event.altKey) return;
    var handled = false;
    switch (event.key) {
      case "a":
        handled = click("approve");
        break;
      case "n":
        handled = click("approve-next");
        break;
      case "e": {
        var edit = document.getElementById("edit");
        if (edit) {
          edit.open = true;
          handled = focus("id_root_cause");
        }
        break;
      }
      case "r":
        handled = focus("reject-note");
        break;
      case "m":
        handled = focus("evidence-note");
        break;
      case "j":
        handled = go(root.dataset.next);
        break;
      case "k":
        handled = go(root.dataset.previous);
        break;
      case "u":
        handled = go(root.dataset.queue);
        break;
      default:
        break;
    }
    if (handled) event.preventDefault();
  });
})();
