/* Reload the page every few seconds to follow the jobs, but never under an operator who is typing a factor into
   a rescale form (a reload would wipe the field): a focused or edited form field holds the reload back. */
(function (seconds) {
  document.addEventListener("input", function (event) { event.target.dataset.edited = "1"; });
  setInterval(function () {
    var active = document.activeElement;
    if (active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) return;
    if (document.querySelector("[data-edited]")) return;
    location.reload();
  }, seconds * 1000);
})
