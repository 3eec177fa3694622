// The chat page's frame: the sidebar as a drawer on narrow screens, the header's menu, and the
// export menu.
import { HeaderMenu } from "./header-menu.js";

const $ = (id) => document.getElementById(id);

export function closeSidebar() {
  document.body.classList.remove("sidebar-open");
  $("sidebar-toggle").setAttribute("aria-expanded", "false");
  $("scrim").hidden = true;
}

function setUpDrawer() {
  $("sidebar-toggle").addEventListener("click", () => {
    const open = !document.body.classList.contains("sidebar-open");
    document.body.classList.toggle("sidebar-open", open);
    $("sidebar-toggle").setAttribute("aria-expanded", String(open));
    $("scrim").hidden = !open;
    if (open) $("conversation-search").focus();
  });
  $("scrim").addEventListener("click", closeSidebar);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.body.classList.contains("sidebar-open")) {
      closeSidebar();
      $("sidebar-toggle").focus();
    }
  });
}

// The export menu closes once a format is chosen, on Escape, and on a click elsewhere.
function setUpExportMenu() {
  const exportMenu = $("export-menu");
  exportMenu.addEventListener("click", (event) => {
    if (event.target.closest("a")) exportMenu.open = false;
  });
  exportMenu.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && exportMenu.open) {
      event.preventDefault(); // the header's menu, around it on a narrow screen, stays open
      exportMenu.open = false;
      exportMenu.querySelector("summary").focus();
    }
  });
  document.addEventListener("click", (event) => {
    if (exportMenu.open && !exportMenu.contains(event.target)) exportMenu.open = false;
  });
}

export function setUpLayout() {
  setUpDrawer();
  new HeaderMenu($("header-menu-button"), $("header-actions"));
  setUpExportMenu();
}
