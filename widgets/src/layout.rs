//! Geometry: where the workbench puts its tab bar, the focused shell, its
//! panels and the status line; and small helpers shared by the overlays.
//!
//! On a terminal at least [`DASHBOARD_MIN_COLS`] wide the workbench is a
//! dashboard: the shell beside a column holding the sessions, network and
//! escalation panels at once. Narrower, one panel at a time sits beside
//! the shell (or none). Either way the pane can be zoomed to the whole body.

use ratatui::layout::{Constraint, Layout, Rect};

/// The narrowest terminal that gets the dashboard column.
pub const DASHBOARD_MIN_COLS: u16 = 140;
/// A panel of the column is never shorter than this (border included).
pub const PANEL_MIN_ROWS: u16 = 6;
/// The column's share of the width, in percent, and its bounds.
pub const DEFAULT_SPLIT: u16 = 38;
pub const MIN_SPLIT: u16 = 20;
pub const MAX_SPLIT: u16 = 60;

/// The workbench's side panels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PanelKind {
    Sessions,
    Network,
    Escalations,
    Audit,
}

/// What the human chose of the layout (the workbench keeps it per user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutChoice {
    /// The dashboard column, when the terminal is wide enough.
    pub dashboard: bool,
    /// The column's (or the one panel's) share of the width, in percent.
    pub split: u16,
}

impl Default for LayoutChoice {
    /// The dashboard on (it shows only where the terminal is wide enough):
    /// its panels cost nothing while nothing changes, as they update from
    /// the coordinators' events.
    fn default() -> Self {
        LayoutChoice {
            dashboard: true,
            split: DEFAULT_SPLIT,
        }
    }
}

impl LayoutChoice {
    /// The split moved by `delta` percent, within its bounds.
    pub fn nudged(self, delta: i16) -> LayoutChoice {
        let split = (self.split as i16 + delta).clamp(MIN_SPLIT as i16, MAX_SPLIT as i16) as u16;
        LayoutChoice { split, ..self }
    }

    /// The split that puts the panels' column's left edge at `column` of
    /// a body `width` columns wide from `left` (a drag of the border with
    /// the mouse), within its bounds.
    pub fn split_at(self, left: u16, width: u16, column: u16) -> LayoutChoice {
        let right = u32::from(left) + u32::from(width);
        let share = (right.saturating_sub(u32::from(column)) * 100)
            .checked_div(u32::from(width))
            .unwrap_or(u32::from(DEFAULT_SPLIT));
        let split = share.clamp(u32::from(MIN_SPLIT), u32::from(MAX_SPLIT)) as u16;
        LayoutChoice { split, ..self }
    }
}

/// What to lay out now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutSpec {
    pub choice: LayoutChoice,
    /// The one panel a narrow terminal shows (or the audit panel, which the
    /// dashboard adds below its three).
    pub panel: Option<PanelKind>,
    /// The focused pane takes the whole body.
    pub zoom: bool,
}

impl LayoutSpec {
    /// The dashboard wanted, with `panel` and `zoom`.
    pub fn with(panel: Option<PanelKind>, zoom: bool) -> LayoutSpec {
        LayoutSpec {
            choice: LayoutChoice {
                dashboard: true,
                ..LayoutChoice::default()
            },
            panel,
            zoom,
        }
    }
}

/// Where everything goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkbenchAreas {
    pub tabs: Rect,
    pub pane: Rect,
    /// Top to bottom.
    pub panels: Vec<(PanelKind, Rect)>,
    pub status: Rect,
}

impl WorkbenchAreas {
    /// Where `kind` is drawn, if it is.
    pub fn panel(&self, kind: PanelKind) -> Option<Rect> {
        self.panels
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, r)| *r)
    }
}

/// Whether `area` gets the dashboard column under `spec`.
pub fn is_dashboard(area: Rect, spec: &LayoutSpec) -> bool {
    let body_rows = area.height.saturating_sub(2);
    let wanted = dashboard_panels(spec.panel).len() as u16;
    spec.choice.dashboard
        && !spec.zoom
        && area.width >= DASHBOARD_MIN_COLS
        && body_rows >= wanted.min(3) * PANEL_MIN_ROWS
}

fn dashboard_panels(extra: Option<PanelKind>) -> Vec<PanelKind> {
    let mut panels = vec![
        PanelKind::Sessions,
        PanelKind::Network,
        PanelKind::Escalations,
    ];
    if extra == Some(PanelKind::Audit) {
        panels.push(PanelKind::Audit);
    }
    panels
}

/// The workbench's areas in `area` (the whole terminal).
pub fn workbench(area: Rect, spec: &LayoutSpec) -> WorkbenchAreas {
    let [tabs, body, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    let split = |share: u16| {
        let [pane, column] = Layout::horizontal([
            Constraint::Min(30),
            Constraint::Percentage(share.clamp(MIN_SPLIT, MAX_SPLIT)),
        ])
        .areas(body);
        (pane, column)
    };
    let panels = if spec.zoom {
        Vec::new()
    } else if is_dashboard(area, spec) {
        let (pane, column) = split(spec.choice.split);
        let mut kinds = dashboard_panels(spec.panel);
        // The audit panel only where there is room for four.
        if column.height < kinds.len() as u16 * PANEL_MIN_ROWS {
            kinds.truncate(3);
        }
        let rows = Layout::vertical(
            kinds
                .iter()
                .map(|_| Constraint::Min(PANEL_MIN_ROWS))
                .collect::<Vec<_>>(),
        )
        .split(column);
        let panels = kinds.into_iter().zip(rows.iter().copied()).collect();
        return WorkbenchAreas {
            tabs,
            pane,
            panels,
            status,
        };
    } else {
        match spec.panel {
            Some(kind) if body.width >= 60 => {
                // The network table's rule column needs the room.
                let share = match kind {
                    PanelKind::Network => spec.choice.split.max(55),
                    _ => spec.choice.split.max(40),
                };
                let (pane, column) = split(share);
                return WorkbenchAreas {
                    tabs,
                    pane,
                    panels: vec![(kind, column)],
                    status,
                };
            }
            _ => Vec::new(),
        }
    };
    WorkbenchAreas {
        tabs,
        pane: body,
        panels,
        status,
    }
}

/// A `width` x `height` rectangle centred in `area`, shrunk to fit it, so an
/// overlay never reaches outside the terminal however small it is.
pub(crate) fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centres_and_clamps() {
        let area = Rect::new(10, 5, 20, 10);
        assert_eq!(centered(area, 10, 4), Rect::new(15, 8, 10, 4));
        assert_eq!(centered(area, 50, 50), area);
        assert_eq!(centered(Rect::new(0, 0, 0, 0), 5, 5), Rect::new(0, 0, 0, 0));
    }

    fn spec(panel: Option<PanelKind>, zoom: bool) -> LayoutSpec {
        LayoutSpec::with(panel, zoom)
    }

    #[test]
    fn wide_terminals_show_three_panels_at_once_narrow_ones_one() {
        let wide = workbench(Rect::new(0, 0, 200, 50), &spec(None, false));
        let kinds: Vec<PanelKind> = wide.panels.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            kinds,
            [
                PanelKind::Sessions,
                PanelKind::Network,
                PanelKind::Escalations
            ]
        );
        for (_, r) in &wide.panels {
            assert!(r.height >= PANEL_MIN_ROWS, "{r:?}");
            assert_eq!(r.x, wide.pane.x + wide.pane.width);
        }
        assert_eq!(wide.pane.height, 48);

        let narrow = workbench(Rect::new(0, 0, 120, 40), &spec(None, false));
        assert!(narrow.panels.is_empty());
        assert_eq!(narrow.pane.width, 120);
        let one = workbench(
            Rect::new(0, 0, 120, 40),
            &spec(Some(PanelKind::Network), false),
        );
        assert_eq!(one.panels.len(), 1);
        assert_eq!(one.panel(PanelKind::Network).unwrap().height, 38);

        // Too short for three panels: one at a time, as on a narrow one.
        let short = workbench(Rect::new(0, 0, 200, 14), &spec(None, false));
        assert!(short.panels.is_empty());
        // Not wanted: as on a narrow one.
        let off = LayoutSpec {
            choice: LayoutChoice {
                dashboard: false,
                ..LayoutChoice::default()
            },
            ..spec(None, false)
        };
        assert!(workbench(Rect::new(0, 0, 200, 50), &off).panels.is_empty());
        // Wanted by default.
        let default = LayoutSpec {
            choice: LayoutChoice::default(),
            ..spec(None, false)
        };
        assert_eq!(
            workbench(Rect::new(0, 0, 200, 50), &default).panels.len(),
            3
        );
    }

    #[test]
    fn zoom_gives_the_pane_the_whole_body_and_the_split_moves_within_bounds() {
        let z = workbench(
            Rect::new(0, 0, 200, 50),
            &spec(Some(PanelKind::Sessions), true),
        );
        assert!(z.panels.is_empty());
        assert_eq!((z.pane.width, z.pane.height), (200, 48));
        let c = spec(None, false).choice;
        assert_eq!(c.nudged(-100).split, MIN_SPLIT);
        assert_eq!(c.nudged(100).split, MAX_SPLIT);
        // A drag of the border: where it lets go, within the bounds.
        assert_eq!(c.split_at(0, 200, 120).split, 40);
        assert_eq!(c.split_at(0, 200, 199).split, MIN_SPLIT);
        assert_eq!(c.split_at(0, 200, 0).split, MAX_SPLIT);
        assert_eq!(c.split_at(0, 0, 0).split, DEFAULT_SPLIT);
        let dragged = LayoutSpec {
            choice: c.split_at(0, 200, 120),
            panel: None,
            zoom: false,
        };
        let at = workbench(Rect::new(0, 0, 200, 50), &dragged);
        assert_eq!(at.panels[0].1.x, 120);
        let wider = LayoutSpec {
            choice: c.nudged(10),
            panel: None,
            zoom: false,
        };
        let a = workbench(Rect::new(0, 0, 200, 50), &spec(None, false));
        let b = workbench(Rect::new(0, 0, 200, 50), &wider);
        assert!(b.pane.width < a.pane.width);
        // The audit panel joins the column where it fits.
        let audit = workbench(
            Rect::new(0, 0, 200, 50),
            &spec(Some(PanelKind::Audit), false),
        );
        assert_eq!(audit.panels.len(), 4);
    }
}
